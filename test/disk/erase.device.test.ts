// erase_devices through the real API on loop devices: a discard that leaves the data is caught by the
// read-back and the overwrite runs; shred's passes and zeroize as the node sets them; disks in parallel up
// to disk_erasure_concurrency with per-disk progress; read-only disks refused or skipped; the ATA path with
// a fake hdparm (a frozen drive, the continue setting, an erase the read-back proves); erase_devices_express.
import { copyFile, open, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { builtinStep, hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import type { AgentClient, CommandResult } from '../helpers/agent-client.ts';
import { withAgentOn } from '../helpers/agent-on-disks.ts';
import { FAKE_HDPARM } from '../helpers/fake-hdparm.ts';
import { installFakes, type FakeTools } from '../helpers/fake-tools.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

let fakes: FakeTools | undefined;
afterEach(async () => {
  await fakes?.close();
  fakes = undefined;
});

const withAgent = withAgentOn;

const step = (name: string) => ({ ...builtinStep('clean', name), requires_ramdisk: true });
const params = (name: string, info: Record<string, unknown>) => ({
  step: step(name),
  node: { uuid: '2005a784-89ea-4482-b56a-65497029a47e', properties: {}, instance_info: {}, driver_internal_info: info },
  ports: [],
  clean_version: hardwareManagerVersions(),
});

function execute(c: AgentClient, info: Record<string, unknown> = {}, name = 'erase_devices'): Promise<CommandResult> {
  return c.command('clean.execute_clean_step', params(name, info), { poll: true });
}

const resultOf = (r: CommandResult) => (r.command_result as { clean_result: Record<string, any> }).clean_result;
const details = (r: CommandResult) => r.command_error as { type: string; details: string };

async function fill(dev: LoopDevice, byte = 0xa5): Promise<void> {
  const fh = await open(dev.path, 'r+');
  await fh.write(Buffer.alloc(dev.sizeBytes, byte), 0, dev.sizeBytes, 0);
  await fh.sync();
  await fh.close();
}

const count = (data: Buffer, byte: number) => data.reduce((n, b) => n + (b === byte ? 1 : 0), 0);

/** A blkdiscard that says yes and does nothing, as a drive that acknowledges TRIM but keeps the data. */
const LYING_BLKDISCARD = 'process.exit(0);';

describe('erase_devices on loop devices', () => {
  it('a discard that leaves the data is caught by the read-back, and the overwrite erases the disk', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      fakes = await installFakes({ blkdiscard: LYING_BLKDISCARD });
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c);
        expect(r.command_error).toBeNull();
        const disk = resultOf(r)[d!.path];
        expect(disk).toMatchObject({
          method: 'overwrite',
          passes: 2,
          bytes: d!.sizeBytes,
          verification: { ok: true, expect: 'zeros' },
        });
        expect(disk.attempts.map((a: { method: string }) => a.method)).toEqual([
          'ata security erase',
          'secure discard',
        ]);
        expect(disk.attempts[1].error).toMatch(/read-back found non-zero data at byte \d+ \(seed \d+\)/);
      });
      expect(await fakes.calls('blkdiscard')).toEqual([['-s', d!.path]]);
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('a discard that did nothing is caught on an empty disk too (the canaries, not zeros, are what it must erase)', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      fakes = await installFakes({ blkdiscard: LYING_BLKDISCARD });
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c);
        expect(r.command_error).toBeNull();
        const disk = resultOf(r)[d!.path];
        expect(disk).toMatchObject({ method: 'overwrite', verification: { ok: true, expect: 'zeros' } });
        expect(disk.attempts[1]).toMatchObject({ method: 'secure discard' });
        expect(disk.attempts[1].error).toMatch(/read-back found non-zero data at byte \d+ \(seed \d+\)/);
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('shred passes as the node sets them: two random passes, then zeros', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      await withAgent([d!], { 'ipa-erase-discard': 'false' }, async (c) => {
        const r = await execute(c, { agent_erase_devices_iterations: 2, agent_erase_devices_zeroize: true });
        expect(resultOf(r)[d!.path]).toMatchObject({
          method: 'overwrite',
          passes: 3,
          verification: { ok: true, expect: 'zeros' },
        });
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('zeroize off: the random pass is the last, and the read-back proves no old block is left', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      await withAgent([d!], { 'ipa-erase-discard': 'false' }, async (c) => {
        const r = await execute(c, { agent_erase_devices_iterations: 1, agent_erase_devices_zeroize: false });
        expect(resultOf(r)[d!.path]).toMatchObject({
          method: 'overwrite',
          passes: 1,
          verification: { ok: true, expect: 'changed' },
        });
      });
      const data = await readFile(d!.path);
      expect(count(data, 0xa5)).toBeLessThan(data.length / 100);
      expect(count(data, 0)).toBeLessThan(data.length / 100);
    });
  });

  it('disks are erased side by side up to disk_erasure_concurrency, each with its own progress', async () => {
    await withLoops([32 * MiB, 32 * MiB, 32 * MiB], async (devs) => {
      await withAgent(devs, { 'ipa-erase-discard': 'false' }, async (c) => {
        for (const concurrency of [2, 1]) {
          const started = await c.command(
            'clean.execute_clean_step',
            params('erase_devices', { disk_erasure_concurrency: concurrency }),
            { wait: false },
          );
          let last = started;
          let most = 0;
          while (last.command_status === 'RUNNING') {
            const disks =
              (last.command_result as { disks?: Record<string, { phase: string; device?: string }> } | null)?.disks ??
              {};
            const busy = Object.values(disks).filter((p) => !['waiting', 'done', 'failed'].includes(p.phase));
            most = Math.max(most, busy.length);
            for (const [dev, p] of Object.entries(disks)) if (p.device) expect(p.device).toBe(dev);
            await new Promise((r) => setTimeout(r, 50));
            last = (await c.lastCommand())!;
          }
          expect(last.command_status).toBe('SUCCEEDED');
          expect(most).toBe(concurrency);
          expect(Object.keys(resultOf(last)).sort()).toEqual(devs.map((d) => d.path).sort());
        }
      });
    });
  }, 300_000);

  it('a read-only disk fails the step naming it, unless the node says to skip it; then it is reported as skipped', async () => {
    await withLoops([8 * MiB, 8 * MiB], async ([rw, ro]) => {
      await fill(rw!);
      await fill(ro!);
      await execa('blockdev', ['--setro', ro!.path]);
      try {
        await withAgent([rw!, ro!], {}, async (c) => {
          const failed = await execute(c);
          expect(failed.command_status).toBe('FAILED');
          expect(details(failed)).toMatchObject({ type: 'BlockDeviceEraseError' });
          expect(details(failed).details).toContain(
            `Failed to invoke erase of device ${ro!.path} as the device is flagged read-only`,
          );
          expect((await readFile(rw!.path)).every((b) => b === 0xa5)).toBe(true);

          const r = await execute(c, { agent_erase_skip_read_only: true });
          expect(r.command_status).toBe('SUCCEEDED');
          expect(resultOf(r)[ro!.path]).toEqual({ skipped: 'read-only' });
          expect(resultOf(r)[rw!.path].verification.ok).toBe(true);
        });
        expect((await readFile(ro!.path)).every((b) => b === 0xa5)).toBe(true);
      } finally {
        await execa('blockdev', ['--setrw', ro!.path]);
      }
    });
  });
});

describe('erase_devices with ATA security (fake hdparm)', () => {
  async function ata(fixture: string, behaviour: Record<string, boolean>): Promise<FakeTools> {
    const f = await installFakes({ hdparm: FAKE_HDPARM });
    await copyFile(
      join(import.meta.dirname, '..', 'fixtures', 'hdparm', `${fixture}.txt`),
      join(f.dir, 'identify.txt'),
    );
    await writeFile(join(f.dir, 'behaviour.json'), JSON.stringify(behaviour));
    return f;
  }

  it("an erase the read-back proves is the disk's method", async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      fakes = await ata('enhanced-capable', { zeroDevice: true });
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c);
        expect(resultOf(r)[d!.path]).toMatchObject({
          method: 'ata enhanced security erase',
          attempts: [],
          verification: { ok: true, expect: 'changed' },
        });
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('a drive that reports an erase but keeps its data fails the step, naming the disk and why; the password is gone', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      fakes = await ata('enhanced-capable', {});
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c);
        expect(r.command_status).toBe('FAILED');
        expect(details(r).details).toMatch(
          new RegExp(
            `Failed to erase 1 of 1 device\\(s\\): ${d!.path}: secure erase failed and falling back .* ata enhanced security erase of ${d!.path} left data behind`,
          ),
        );
      });
      expect(await readFile(join(fakes.dir, 'identify.txt'), 'utf8')).toMatch(/^\tnot\tenabled$/m);
    });
  });

  it('a frozen drive: the step fails saying so, or, where the node allows, the disk is erased by the next method', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      fakes = await ata('frozen', {});
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c);
        expect(r.command_status).toBe('FAILED');
        expect(details(r).details).toContain(`Block device ${d!.path} is frozen and cannot be erased`);
        expect((await readFile(d!.path)).every((b) => b === 0xa5)).toBe(true);

        // The deprecated ATA-only key still counts when the newer one is absent.
        const ok = await execute(c, { agent_continue_if_ata_erase_failed: true });
        expect(ok.command_status).toBe('SUCCEEDED');
        const disk = resultOf(ok)[d!.path];
        expect(disk.attempts[0].error).toContain('is frozen');
        expect(['secure discard', 'discard']).toContain(disk.method);
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('agent_enable_ata_secure_erase false: hdparm is never asked', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      fakes = await ata('enhanced-capable', { zeroDevice: true });
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c, { agent_enable_ata_secure_erase: false });
        expect(['secure discard', 'discard']).toContain(resultOf(r)[d!.path].method);
      });
      expect(await fakes.calls('hdparm')).toEqual([]);
    });
  });
});

describe('erase_devices_express', () => {
  it('discards where the read-back proves it, else erases the metadata only', async () => {
    await withLoops([16 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+4M', d!.path]);
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c, {}, 'erase_devices_express');
        expect(['secure discard', 'discard']).toContain(resultOf(r)[d!.path].method);
        fakes = await installFakes({ blkdiscard: LYING_BLKDISCARD });
        await execa('sgdisk', ['-n', '1:0:+4M', d!.path]);
        const m = await execute(c, {}, 'erase_devices_express');
        expect(m.command_status).toBe('SUCCEEDED');
        expect(resultOf(m)[d!.path]).toMatchObject({ method: 'metadata', verification: null });
      });
      expect((await execa('wipefs', ['-n', '--noheadings', d!.path])).stdout.trim()).toBe('');
    });
  });
});
