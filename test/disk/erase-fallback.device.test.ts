// What happens after the first method of a disk erase: a disk mounted while an earlier method ran (which can
// take hours) must stop the erase before the next method writes, and express must not let a discard the
// drive honours only in part stand in for its metadata erase. Loop devices, fake hdparm and blkdiscard.
import { copyFile, mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { parseSecurity } from '../../agent/disk/ata-erase.ts';
import { eraseDisk, type LastResort } from '../../agent/disk/erase-disk.ts';
import type { EraseSettings } from '../../agent/disk/erase-settings.ts';
import { ProtectedDeviceError } from '../../agent/errors.ts';
import { nullLogger } from '../../agent/log.ts';
import { ProgressMeter } from '../../agent/progress.ts';
import { DeviceGuard } from '../../agent/safety/device-guard.ts';
import { eraseSettings, loopAsDisk } from '../helpers/erase-case.ts';
import { FAKE_HDPARM } from '../helpers/fake-hdparm.ts';
import { installFakes, type FakeTools } from '../helpers/fake-tools.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

let fakes: FakeTools | undefined;
afterEach(async () => {
  await fakes?.close();
  fakes = undefined;
});

const settings = (over: Partial<EraseSettings>) => eraseSettings({ continueIfSecureEraseFailed: true, ...over });

function erase(d: LoopDevice, s: EraseSettings, lastResort?: LastResort) {
  const dev = loopAsDisk(d);
  const services = { guard: new DeviceGuard([d.path]), log: nullLogger };
  return eraseDisk(services, dev, s, new ProgressMeter(() => {}, nullLogger), new Set([dev.name]), lastResort);
}

const ext4At = async (dev: string, offset = 0) =>
  (await execa('blkid', ['-p', '-O', String(offset), '-o', 'export', dev], { reject: false })).stdout.includes(
    'TYPE=ext4',
  );

describe('a disk mounted during the secure erase attempt', () => {
  // The drive reports frozen, so the node's continue setting falls back; `hdparm -I` mounts the disk first.
  async function mountedWhileIdentifying(d: LoopDevice, mnt: string, fixture = 'frozen'): Promise<FakeTools> {
    const mountFirst = `
if (args[0] === '-I' && !fs.existsSync(state + '/mounted')) {
  require('node:child_process').execFileSync('mount', [args[1], ${JSON.stringify(mnt)}]);
  fs.writeFileSync(state + '/mounted', '');
}
`;
    const f = await installFakes({ hdparm: mountFirst + FAKE_HDPARM, blkdiscard: 'process.exit(0);' });
    await copyFile(
      join(import.meta.dirname, '..', 'fixtures', 'hdparm', `${fixture}.txt`),
      join(f.dir, 'identify.txt'),
    );
    await execa('mkfs.ext4', ['-q', '-F', d.path]);
    return f;
  }

  it('a drive the erase unlocked gets no canaries and no erase, and loses our password again', async () => {
    const mnt = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
    try {
      await withLoops([32 * MiB], async ([d]) => {
        try {
          fakes = await mountedWhileIdentifying(d!, mnt, 'locked');
          const err = await erase(d!, settings({ discard: false })).catch((e: unknown) => e);
          expect(err).toBeInstanceOf(ProtectedDeviceError);
          expect((err as Error).message).toMatch(/^refusing to run an ATA security erase on \/dev\/loop\d+: /);
          const ops = (await fakes.calls('hdparm')).filter((a) => a[0] !== '-I').map((a) => a[2]);
          expect(ops).toEqual(['--security-unlock', '--security-disable']);
          const page = await readFile(join(fakes.dir, 'identify.txt'), 'utf8');
          expect(parseSecurity(page)).toMatchObject({ enabled: false, locked: false });
          expect(await ext4At(d!.path)).toBe(true);
        } finally {
          await execa('umount', [mnt], { reject: false });
        }
      });
    } finally {
      await rm(mnt, { recursive: true, force: true });
    }
  });

  for (const [discard, refusal] of [
    [false, /refusing to overwrite \/dev\/loop\d+: /],
    [true, /refusing to run a secure discard on \/dev\/loop\d+: /],
  ] as const) {
    it(`is refused by the guard before the fallback writes (discard ${discard ? 'on' : 'off'})`, async () => {
      const mnt = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      try {
        await withLoops([32 * MiB], async ([d]) => {
          try {
            fakes = await mountedWhileIdentifying(d!, mnt);
            const err = await erase(d!, settings({ discard })).catch((e: unknown) => e);
            expect(err).toBeInstanceOf(ProtectedDeviceError);
            expect((err as Error).message).toMatch(refusal);
            expect(await fakes.calls('blkdiscard')).toEqual([]);
            expect(await ext4At(d!.path)).toBe(true);
          } finally {
            await execa('umount', [mnt], { reject: false });
          }
        });
      } finally {
        await rm(mnt, { recursive: true, force: true });
      }
    });
  }
});

describe('erase_devices_express after a discard', () => {
  it('a discard that passes the read-back but left a filesystem signature still gets the metadata erase', async () => {
    // Zeroes all but the 4 KiB holding partition 1's ext4 superblock.
    const partial = `
const dev = args.at(-1); const fd = fs.openSync(dev, 'r+');
const size = Number(require('node:child_process').execFileSync('blockdev', ['--getsize64', dev]));
const z = Buffer.alloc(4096); const keep = 8 << 20;
for (let at = 0; at < size; at += 4096) if (at !== keep) fs.writeSync(fd, z, 0, 4096, at);
fs.fsyncSync(fd); fs.closeSync(fd);`;
    await withLoops([64 * MiB], async ([d]) => {
      await execa('sfdisk', ['-q', d!.path], { input: 'label: gpt\nstart=16384, size=65536\n' });
      await execa('partx', ['-u', d!.path], { reject: false });
      await execa('mkfs.ext4', ['-q', '-F', `${d!.path}p1`]);
      fakes = await installFakes({ blkdiscard: partial });
      const r = await erase(d!, settings({ ataSecureErase: false }), 'metadata');
      expect(await fakes.calls('blkdiscard')).toEqual([['-s', d!.path]]);
      // The sampled read-back may by chance land on the kept block; then 'metadata' is the honest method.
      expect(['secure discard', 'metadata']).toContain(r.method);
      expect(await ext4At(d!.path, 8 * MiB)).toBe(false);
    });
  });
});
