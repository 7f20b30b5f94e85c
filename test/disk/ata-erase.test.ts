// ATA security erase against recorded `hdparm -I` pages (a SATA SSD's identify page in hdparm 9.65's
// layout, one per security state) and a fake hdparm on PATH that records its calls and keeps the drive's
// state. Whatever happens once the password may have been set, it is gone at the end.
import { copyFile, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ataSecureErase, parseSecurity } from '../../agent/disk/ata-erase.ts';
import { run } from '../../agent/exec.ts';
import { installFakes, type FakeTools } from '../helpers/fake-tools.ts';
import { FAKE_HDPARM } from '../helpers/fake-hdparm.ts';

// The real `run`, watched: the options an erase is started with show its time limit.
vi.mock('../../agent/exec.ts', async (importOriginal) => {
  const real = await importOriginal<typeof import('../../agent/exec.ts')>();
  return { ...real, run: vi.fn(real.run) };
});

const FIXTURES = join(import.meta.dirname, '..', 'fixtures', 'hdparm');
const DISK = '/dev/fake-sdb';
let fakes: FakeTools | undefined;

afterEach(async () => {
  await fakes?.close();
  fakes = undefined;
});

async function drive(fixture: string, behaviour: Record<string, boolean> = {}): Promise<FakeTools> {
  fakes = await installFakes({ hdparm: FAKE_HDPARM });
  await copyFile(join(FIXTURES, `${fixture}.txt`), join(fakes.dir, 'identify.txt'));
  await writeFile(join(fakes.dir, 'behaviour.json'), JSON.stringify(behaviour));
  return fakes;
}

async function finalState(f: FakeTools) {
  return parseSecurity(await readFile(join(f.dir, 'identify.txt'), 'utf8'))!;
}

/** The calls that change the drive (not the -I reads), as `op password`. */
async function securityCalls(f: FakeTools): Promise<string[]> {
  return (await f.calls('hdparm')).filter((a) => a[0] !== '-I').map((a) => `${a[2]} ${a[3]}`);
}

describe('hdparm -I security section', () => {
  it('reads each recorded state exactly ("not enabled" is not "enabled")', async () => {
    const read = async (f: string) => parseSecurity(await readFile(join(FIXTURES, `${f}.txt`), 'utf8'));
    expect(await read('enhanced-capable')).toEqual({
      supported: true,
      enabled: false,
      locked: false,
      frozen: false,
      enhanced: true,
      eraseMinutes: 2,
      enhancedEraseMinutes: 4,
    });
    expect(await read('normal-only')).toMatchObject({
      supported: true,
      enhanced: false,
      eraseMinutes: 2,
      enhancedEraseMinutes: null,
    });
    expect(await read('frozen')).toMatchObject({ supported: true, frozen: true, locked: false });
    expect(await read('locked')).toMatchObject({ enabled: true, locked: true, frozen: false });
    expect(await read('enabled')).toMatchObject({ enabled: true, locked: false });
    expect(await read('unsupported')).toMatchObject({ supported: false, enhanced: false });
    expect(parseSecurity('\n/dev/loop6:\n')).toBeNull();
  });
});

describe('ATA security erase', () => {
  it('sets the password, runs the enhanced erase, and the drive ends without a password', async () => {
    const f = await drive('enhanced-capable');
    expect(await ataSecureErase(DISK)).toEqual({ erased: true, enhanced: true });
    expect(await securityCalls(f)).toEqual(['--security-set-pass NULL', '--security-erase-enhanced NULL']);
    expect((await f.calls('hdparm')).every((a) => a.at(-1) === DISK)).toBe(true);
    expect(await finalState(f)).toMatchObject({ enabled: false, locked: false });
  });

  it('uses the normal erase where the drive has no enhanced one', async () => {
    const f = await drive('normal-only');
    expect(await ataSecureErase(DISK)).toEqual({ erased: true, enhanced: false });
    expect(await securityCalls(f)).toEqual(['--security-set-pass NULL', '--security-erase NULL']);
    expect((await finalState(f)).enabled).toBe(false);
  });

  it('reports a frozen drive clearly and sends it no security command', async () => {
    const f = await drive('frozen');
    await expect(ataSecureErase(DISK)).rejects.toThrow(
      /\/dev\/fake-sdb is frozen and cannot be erased.*suspend and resume/,
    );
    expect(await securityCalls(f)).toEqual([]);
  });

  it('unlocks a drive left locked with our password, erases it, and leaves it without one', async () => {
    const f = await drive('locked');
    expect(await ataSecureErase(DISK)).toEqual({ erased: true, enhanced: true });
    // Already enabled with NULL after the unlock: no new password is set.
    expect(await securityCalls(f)).toEqual(['--security-unlock NULL', '--security-erase-enhanced NULL']);
    expect(await finalState(f)).toMatchObject({ enabled: false, locked: false });
  });

  it('a drive unlocked with our password keeps none when the step stops before the erase (a guard refusing)', async () => {
    const f = await drive('locked');
    const refusal = new Error('refusing to run an ATA security erase on /dev/fake-sdb: mounted at /mnt');
    await expect(
      ataSecureErase(DISK, {
        beforeErase: () => {
          throw refusal;
        },
      }),
    ).rejects.toBe(refusal);
    expect(await securityCalls(f)).toEqual(['--security-unlock NULL', '--security-disable NULL']);
    expect(await finalState(f)).toMatchObject({ enabled: false, locked: false });
  });

  it("refuses a drive locked with somebody else's password, and erases nothing", async () => {
    const f = await drive('locked', { unlockFails: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(
      'Block device /dev/fake-sdb already has a security password set',
    );
    expect(await securityCalls(f)).toEqual(['--security-unlock NULL', '--security-unlock ']);
  });

  it('erases a drive whose security is enabled but unlocked, without setting a password', async () => {
    const f = await drive('enabled');
    expect(await ataSecureErase(DISK)).toEqual({ erased: true, enhanced: true });
    expect(await securityCalls(f)).toEqual(['--security-erase-enhanced NULL']);
    expect((await finalState(f)).enabled).toBe(false);
  });

  it('says why a drive without the security feature set is not erased, and touches nothing', async () => {
    const f = await drive('unsupported');
    expect(await ataSecureErase(DISK)).toEqual({
      erased: false,
      reason: 'the drive does not support the ATA security feature set',
    });
    expect(await securityCalls(f)).toEqual([]);
  });

  it('a failed erase: unlocks and disables the password, then reports the failure', async () => {
    const f = await drive('enhanced-capable', { eraseFails: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(
      /Erase failed for device \/dev\/fake-sdb: .*SECURITY_ERASE: Input\/output error/,
    );
    expect(await securityCalls(f)).toEqual([
      '--security-set-pass NULL',
      '--security-erase-enhanced NULL',
      '--security-unlock NULL',
      '--security-disable NULL',
    ]);
    expect(await finalState(f)).toMatchObject({ enabled: false, locked: false });
  });

  it('an erase that times out: the tool is stopped and the password removed', async () => {
    const f = await drive('enhanced-capable', { eraseHangs: true });
    await expect(ataSecureErase(DISK, { eraseTimeoutMs: 1500 })).rejects.toThrow(/Erase failed .*timed out/);
    expect(await securityCalls(f)).toEqual([
      '--security-set-pass NULL',
      '--security-erase-enhanced NULL',
      '--security-disable NULL',
    ]);
    expect((await finalState(f)).enabled).toBe(false);
  });

  it('an erase tool that crashes: the password is removed all the same', async () => {
    const f = await drive('normal-only', { eraseCrashes: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(/Erase failed for device/);
    expect((await securityCalls(f)).slice(-1)).toEqual(['--security-disable NULL']);
    expect((await finalState(f)).enabled).toBe(false);
  });

  it('a password that cannot be set: nothing is erased, and no password stays', async () => {
    const f = await drive('enhanced-capable', { setPassFails: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(/Security password set failed for device \/dev\/fake-sdb/);
    expect(await securityCalls(f)).toEqual(['--security-set-pass NULL']);
    expect((await finalState(f)).enabled).toBe(false);
  });

  it('a password that cannot be removed is reported, with the erase failure', async () => {
    const f = await drive('enhanced-capable', { eraseFails: true, unlockFails: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(
      /Erase failed .*and the security password NULL could not be removed \(security is still enabled and locked\)/,
    );
    expect((await finalState(f)).enabled).toBe(true);
  });

  it('sets no time limit on an erase the drive estimates as "more than 508min", or not at all', async () => {
    const eraseTimeout = async (times: string | null) => {
      const f = await drive('enhanced-capable');
      const page = await readFile(join(f.dir, 'identify.txt'), 'utf8');
      const line = /^\t.*SECURITY ERASE UNIT.*\n/m;
      await writeFile(join(f.dir, 'identify.txt'), page.replace(line, times === null ? '' : `\t${times}\n`));
      vi.mocked(run).mockClear();
      expect(await ataSecureErase(DISK)).toEqual({ erased: true, enhanced: true });
      await f.close();
      const erase = vi.mocked(run).mock.calls.find(([, args]) => args.includes('--security-erase-enhanced'));
      return erase?.[2]?.timeoutMs;
    };
    const saturated = 'more than 508min for SECURITY ERASE UNIT. more than 508min for ENHANCED SECURITY ERASE UNIT.';
    // 0 is no timeout for `run` (execa); leaving it out would mean run's own 5 minutes.
    expect(await eraseTimeout(saturated)).toBe(0);
    expect(await eraseTimeout(null)).toBe(0);
    // A real estimate still bounds the erase: twice the 4 minutes, plus 10.
    expect(await eraseTimeout('2min for SECURITY ERASE UNIT. 4min for ENHANCED SECURITY ERASE UNIT.')).toBe(
      18 * 60_000,
    );
    expect(parseSecurity(`Security: \n\t\tsupported\n\t${saturated}\n`)).toMatchObject({
      eraseMinutes: null,
      enhancedEraseMinutes: null,
    });
  });

  it('hdparm -I failing is an error, not a verdict on the drive', async () => {
    await drive('enhanced-capable', { identifyFails: true });
    await expect(ataSecureErase(DISK)).rejects.toThrow(/hdparm -I \/dev\/fake-sdb failed/);
  });
});
