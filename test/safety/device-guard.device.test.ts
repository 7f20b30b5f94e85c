// The device guard against real block devices: the machine's root disk, and loop devices this test
// attaches (one of them mounted).
import { constants } from 'node:fs';
import { mkdir, mkdtemp, open, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { ProtectedDeviceError } from '../../agent/errors.ts';
import { DeviceGuard } from '../../agent/safety/device-guard.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

async function rootDisk(): Promise<string> {
  const { stdout } = await execa('findmnt', ['-n', '-o', 'SOURCE', '/']);
  return stdout.trim();
}

/**
 * A sysfs-shaped tree (class/block, dev/block) holding the real loop device `dev`, the given mount table and no
 * swap, and a guard reading it: the stacked devices this kernel cannot make (device-mapper, md) are added to it.
 */
async function withSysTree(
  dev: string,
  mountinfo: string,
  body: (tree: { name: string; classBlock: string; devBlock: string; guard: DeviceGuard }) => Promise<void>,
): Promise<void> {
  const root = await mkdtemp(join(tmpdir(), 'ina-sys-'));
  try {
    const name = dev.slice(5);
    const rdev = (await stat(dev)).rdev;
    const majMin = `${Math.floor(rdev / 256) & 0xfff}:${rdev & 0xff}`;
    const devBlock = join(root, 'dev/block');
    const classBlock = join(root, 'class/block');
    await mkdir(devBlock, { recursive: true });
    await mkdir(join(classBlock, name), { recursive: true });
    await symlink(`../../devices/virtual/block/${name}`, join(devBlock, majMin));
    await writeFile(join(root, 'mountinfo'), mountinfo);
    await writeFile(join(root, 'swaps'), 'Filename Type Size Used Priority\n');
    const guard = new DeviceGuard([dev], {
      mountinfo: join(root, 'mountinfo'),
      swaps: join(root, 'swaps'),
      sysClassBlock: classBlock,
      sysDevBlock: devBlock,
    });
    await body({ name, classBlock, devBlock, guard });
  } finally {
    await rm(root, { recursive: true, force: true });
  }
}

describe('device guard', () => {
  it('refuses the disk holding the root filesystem, even without an allow-list', async () => {
    const root = await rootDisk();
    const guard = new DeviceGuard(null);
    const v = await guard.verdict(root);
    expect(v.ok).toBe(false);
    expect(v.reason).toMatch(/mounted at \//);
    await expect(guard.assertWritable(root, 'write an image to')).rejects.toThrow(ProtectedDeviceError);
    await expect(guard.assertWritable(root, 'write an image to')).rejects.toThrow(
      `refusing to write an image to ${root}: it`,
    );
  });

  it('refuses a device outside the allow-list and allows one on it, with its partitions', () =>
    withLoops([8 * MiB, 8 * MiB], async ([a, b]) => {
      const guard = new DeviceGuard([a!.path]);
      expect(await guard.verdict(a!.path)).toEqual({ ok: true });
      expect(await guard.verdict(b!.path)).toEqual({ ok: false, reason: 'it is not on the device allow-list' });
      await expect(guard.assertWritable(b!.path, 'wipe')).rejects.toThrow(
        `refusing to wipe ${b!.path}: it is not on the device allow-list`,
      );

      await execa('sgdisk', ['-n', '1:2048:+2M', a!.path]);
      await execa('partx', ['-u', a!.path], { reject: false });
      expect(await guard.verdict(`${a!.path}p1`)).toEqual({ ok: true });
      expect((await guard.verdict('/dev/does-not-exist')).ok).toBe(false);
      expect((await guard.verdict('/etc/hostname')).reason).toBe('not a block device');
    }));

  it('refuses a mounted loop device, and a disk whose partition is mounted', () =>
    withLoops([16 * MiB, 16 * MiB], async ([whole, parted]) => {
      const guard = new DeviceGuard([whole!.path, parted!.path]);
      const mnt = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      const mnt2 = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      await execa('mkfs.ext4', ['-q', '-F', whole!.path]);
      await execa('sgdisk', ['-n', '1:2048:0', parted!.path]);
      await execa('partx', ['-u', parted!.path], { reject: false });
      await execa('mkfs.ext4', ['-q', '-F', `${parted!.path}p1`]);
      await execa('mount', [whole!.path, mnt]);
      try {
        await execa('mount', [`${parted!.path}p1`, mnt2]);
        try {
          const v = await guard.verdict(whole!.path);
          expect(v).toEqual({ ok: false, reason: `it is mounted at ${mnt}` });
          const p = await guard.verdict(parted!.path);
          expect(p.ok).toBe(false);
          expect(p.reason).toBe(`it holds ${parted!.path.slice(5)}p1, which is mounted at ${mnt2}`);
        } finally {
          await execa('umount', [mnt2]);
        }
      } finally {
        await execa('umount', [mnt]);
        await rm(mnt, { recursive: true, force: true });
        await rm(mnt2, { recursive: true, force: true });
      }
      expect(await guard.verdict(whole!.path)).toEqual({ ok: true });
      expect(await guard.verdict(parted!.path)).toEqual({ ok: true });
    }));

  it('refuses a device under a mounted stacked device (device-mapper, md) — sysfs tree as the kernel shows it', () =>
    // This kernel has no device-mapper, so the stacked device lives in a sysfs-shaped tree around a real loop device.
    withLoops([8 * MiB], async ([loop]) =>
      withSysTree(
        loop!.path,
        '30 1 253:0 / /srv/data rw,relatime - ext4 /dev/mapper/vg-data rw\n',
        async ({ name, classBlock, devBlock, guard }) => {
          await mkdir(join(classBlock, 'dm-0/slaves'), { recursive: true });
          await writeFile(join(classBlock, 'dm-0/slaves', name), '');
          await symlink('../../devices/virtual/block/dm-0', join(devBlock, '253:0'));
          expect(await guard.verdict(loop!.path)).toEqual({
            ok: false,
            reason: 'it is under dm-0, which is mounted at /srv/data',
          });
        },
      ),
    ));

  it('refuses a member of a running md array written alone, and the disk holding one — sysfs tree as the kernel shows it', () =>
    // This kernel has no md: the array lives in a sysfs-shaped tree around a real loop device, nothing mounted.
    withLoops([8 * MiB], async ([loop]) =>
      withSysTree(
        loop!.path,
        '30 1 0:99 / /run rw,relatime - tmpfs tmpfs rw\n',
        async ({ name, classBlock, guard }) => {
          expect(await guard.verdict(loop!.path)).toEqual({ ok: true });
          // A partition of it is a member of md0.
          await mkdir(join(classBlock, name, `${name}p1/holders`), { recursive: true });
          await writeFile(join(classBlock, name, `${name}p1/holders/md0`), '');
          await symlink(`${name}/${name}p1`, join(classBlock, `${name}p1`));
          expect(await guard.verdict(loop!.path)).toEqual({
            ok: false,
            reason: `it is the holder of ${name}p1, a member of the software RAID array md0: only the array may be written, or it must be stopped first`,
          });
          await expect(guard.assertWritable(loop!.path, 'write an image to')).rejects.toThrow(ProtectedDeviceError);
          // The whole disk a member itself (an array built on disks, not partitions).
          await rm(join(classBlock, name, `${name}p1`), { recursive: true });
          await rm(join(classBlock, `${name}p1`));
          await mkdir(join(classBlock, name, 'holders'), { recursive: true });
          await writeFile(join(classBlock, name, 'holders/md127'), '');
          expect(await guard.verdict(loop!.path)).toMatchObject({
            ok: false,
            reason: expect.stringMatching(/^it is a member of the software RAID array md127: /),
          });
        },
      ),
    ));

  it('refuses every device when the mount table cannot be read', () =>
    withLoops([8 * MiB], async ([loop]) => {
      const guard = new DeviceGuard([loop!.path], {
        mountinfo: '/nonexistent/mountinfo',
        swaps: '/proc/swaps',
        sysClassBlock: '/sys/class/block',
        sysDevBlock: '/sys/dev/block',
      });
      expect(await guard.verdict(loop!.path)).toEqual({
        ok: false,
        reason: 'whether it is in use cannot be told: the mount table (/nonexistent/mountinfo) cannot be read',
      });
    }));

  it('refuses a device the kernel holds for exclusive use, which no mount table shows', () =>
    withLoops([16 * MiB], async ([loop]) => {
      const guard = new DeviceGuard([loop!.path]);
      const busy =
        'it is held for exclusive use by the kernel (mounted, or part of RAID, LVM, swap or a multi-device filesystem)';
      // Another exclusive user (as md, LVM or a filesystem spanning devices claims its members).
      const holder = await open(loop!.path, constants.O_RDONLY | constants.O_EXCL);
      try {
        expect(await guard.verdict(loop!.path)).toEqual({ ok: false, reason: busy });
      } finally {
        await holder.close();
      }
      expect(await guard.verdict(loop!.path)).toEqual({ ok: true });
      // A filesystem unmounted lazily while a file on it is open: gone from mountinfo, still on the device.
      await execa('mkfs.ext4', ['-q', '-F', loop!.path]);
      const dir = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      await execa('mount', [loop!.path, dir]);
      const open_ = await open(join(dir, 'busy'), 'w');
      try {
        await execa('umount', ['-l', dir]);
        expect(await guard.verdict(loop!.path)).toEqual({ ok: false, reason: busy });
      } finally {
        await open_.close();
        await execa('umount', [dir], { reject: false });
        await rm(dir, { recursive: true, force: true });
      }
      for (let i = 0; (await guard.verdict(loop!.path)).ok === false && i < 50; i++)
        await new Promise((r) => setTimeout(r, 100));
      expect(await guard.verdict(loop!.path)).toEqual({ ok: true });
    }));

  describe('loop devices stacked on other block devices (the kernel lists them in neither holders nor slaves)', () => {
    /** A loop device onto `backing` for the test body, detached afterwards whatever happens. */
    async function withStacked<T>(backing: string, body: (dev: string) => Promise<T>): Promise<T> {
      const dev = (await execa('losetup', ['--find', '--show', backing])).stdout.trim();
      try {
        return await body(dev);
      } finally {
        await execa('losetup', ['-d', dev], { reject: false });
      }
    }

    async function mounted<T>(dev: string, body: (dir: string) => Promise<T>): Promise<T> {
      const dir = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      await execa('mount', [dev, dir]);
      try {
        return await body(dir);
      } finally {
        await execa('umount', [dir], { reject: false });
        await rm(dir, { recursive: true, force: true });
      }
    }

    it('a loop whose backing file is another device: refuses each while the other is mounted', () =>
      withLoops([16 * MiB], async ([under]) =>
        withStacked(under!.path, async (over) => {
          const guard = new DeviceGuard([under!.path, over]);
          expect(await guard.verdict(under!.path)).toEqual({ ok: true });
          expect(await guard.verdict(over)).toEqual({ ok: true });
          await execa('mkfs.ext4', ['-q', '-F', over]);
          await mounted(over, async (dir) => {
            expect(await guard.verdict(under!.path)).toEqual({
              ok: false,
              reason: `it is the backing file of ${over.slice(5)}, which is mounted at ${dir}`,
            });
          });
          await mounted(under!.path, async (dir) => {
            expect(await guard.verdict(over)).toEqual({
              ok: false,
              reason: `it is a loop device onto ${under!.path.slice(5)}, which is mounted at ${dir}`,
            });
          });
          expect(await guard.verdict(under!.path)).toEqual({ ok: true });
        }),
      ));

    it('with an allow-list, a loop onto a block device only when that device is allowed too', () =>
      withLoops([16 * MiB], async ([under]) =>
        withStacked(under!.path, async (over) => {
          expect(await new DeviceGuard([over]).verdict(over)).toEqual({
            ok: false,
            reason: `it is a loop device onto ${under!.path.slice(5)}, which is not on the device allow-list`,
          });
          expect(await new DeviceGuard([over, under!.path]).verdict(over)).toEqual({ ok: true });
        }),
      ));

    it('a loop whose backing file lives on a filesystem of another device: refuses that device while the loop is mounted', () =>
      withLoops([32 * MiB], async ([disk]) => {
        await execa('mkfs.ext4', ['-q', '-F', disk!.path]);
        const outer = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
        await execa('mount', [disk!.path, outer]);
        let lazy = false;
        try {
          const file = join(outer, 'inner.img');
          await execa('truncate', ['-s', String(8 * MiB), file]);
          await withStacked(file, async (inner) => {
            const guard = new DeviceGuard([disk!.path, inner]);
            await execa('mkfs.ext4', ['-q', '-F', inner]);
            await mounted(inner, async (dir) => {
              // Detached from the tree, the outer filesystem no longer shows in mountinfo, but lives on for the loop.
              await execa('umount', ['-l', outer]);
              lazy = true;
              expect(await guard.verdict(disk!.path)).toEqual({
                ok: false,
                reason: `it holds the backing file of ${inner.slice(5)}, which is mounted at ${dir}`,
              });
              // Writing the loop itself writes a file, not the device under it.
              expect((await guard.verdict(inner)).reason).toBe(`it is mounted at ${dir}`);
            });
          });
        } finally {
          if (!lazy) await execa('umount', [outer], { reject: false });
          await rm(outer, { recursive: true, force: true });
        }
      }));
  });
});
