// writeConfigDrivePartition against real loop devices holding GPT and MBR "whole-disk images" made with
// sgdisk/parted: placement, reuse, refusals, and the VFAT rebuild on 4 KiB-sector disks.
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { beforeAll, describe, expect, it } from 'vitest';
import { BlockDeviceError, ConfigDriveError, ProtectedDeviceError } from '../../agent/errors.ts';
import {
  prepareConfigDrive,
  writeConfigDrivePartition,
  type ConfigDriveImage,
} from '../../agent/configdrive/prepare.ts';
import { rebuildAsVfat } from '../../agent/configdrive/fat.ts';
import { DEFAULT_FILES, buildIso, diskServices, toWire } from '../helpers/configdrive.ts';
import { MiB, withLoops } from '../helpers/loop.ts';
import { fourMbrPrimaries } from '../helpers/make-image.ts';

let drive: ConfigDriveImage;

beforeAll(async () => {
  drive = await prepareConfigDrive(diskServices([]), toWire(await buildIso()));
});

async function blkid(dev: string): Promise<Record<string, string>> {
  const { stdout } = await execa('blkid', ['-p', '-o', 'export', dev], { reject: false });
  return Object.fromEntries(
    stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => [l.slice(0, l.indexOf('=')), l.slice(l.indexOf('=') + 1)]),
  );
}

async function table(dev: string): Promise<string> {
  return (await execa('partx', ['-g', '-P', '-o', 'NR,START,SECTORS,TYPE', dev], { reject: false })).stdout;
}

async function partitionBytes(dev: string, n: number): Promise<{ start: number; size: number }> {
  const line = (await table(dev)).split('\n').find((l) => l.startsWith(`NR="${n}"`))!;
  const num = (k: string) => Number(new RegExp(`${k}="(\\d+)"`).exec(line)![1]) * 512;
  return { start: num('START'), size: num('SECTORS') };
}

describe('writeConfigDrivePartition', () => {
  it('adds a 64 MiB Linux partition at the end of a GPT disk and writes the ISO there', async () => {
    await withLoops([200 * MiB], async ([d]) => {
      // A small image's GPT: its backup header sits where the image ended, not at the end of the disk.
      await execa('sgdisk', ['-n', '1:0:+32M', '-t', '1:ef00', d!.path]);
      const services = diskServices([d!.path]);
      const { partition } = await writeConfigDrivePartition(services, d!.path, drive);
      expect(partition).toBe(`${d!.path}p2`);
      const id = await blkid(partition);
      expect(id.TYPE).toBe('iso9660');
      expect(id.LABEL).toBe('config-2');
      expect(id.PART_ENTRY_TYPE).toBe('0fc63daf-8483-4772-8e79-3d69d8477de4');
      const { start, size } = await partitionBytes(d!.path, 2);
      expect(size).toBe(64 * MiB);
      expect(start % MiB).toBe(0);
      expect(200 * MiB - (start + size)).toBeLessThanOrEqual(MiB);
      const onDisk = (await readFile(d!.file)).subarray(start, start + drive.bytes.length);
      expect(onDisk.equals(drive.bytes)).toBe(true);
    });
  });

  it('refuses to write through a partition node the kernel still has at an older place (in use), leaving that place as it was', async () => {
    await withLoops([200 * MiB], async ([d]) => {
      // The disk's previous layout had a partition 2 in its middle, which something still holds open: the
      // kernel cannot drop it, so after the new image's table it still points there.
      await execa('sgdisk', ['-n', '1:0:+32M', '-n', '2:0:+16M', d!.path]);
      await execa('partx', ['-u', d!.path]);
      const old = await partitionBytes(d!.path, 2);
      const holder = await open(`${d!.path}p2`, 'r');
      try {
        await execa('dd', [
          'if=/dev/zero',
          `of=${d!.path}`,
          'bs=1M',
          `seek=${old.start / MiB}`,
          'count=16',
          'conv=fsync',
        ]);
        await execa('sgdisk', ['-d', '2', d!.path], { reject: false });
        const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(BlockDeviceError);
        expect((err as Error).message).toMatch(/did not come to match its table .*older layout still in use/);
        const middle = (await readFile(d!.file)).subarray(old.start, old.start + old.size);
        expect(middle.every((b) => b === 0)).toBe(true);
      } finally {
        await holder.close();
      }
    });
  }, 90_000);

  it('does not reuse a config-2 partition the kernel keeps from an older layout (in use) that the table no longer has', async () => {
    await withLoops([200 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+32M', '-n', '2:0:+16M', d!.path]);
      await execa('partx', ['-u', d!.path]);
      const old = await partitionBytes(d!.path, 2);
      const previous = Buffer.from(drive.bytes);
      previous.fill(0x5a, previous.length - 4096);
      await writeFile(`${d!.path}p2`, previous);
      const holder = await open(`${d!.path}p2`, 'r');
      try {
        await execa('sgdisk', ['-d', '2', d!.path], { reject: false });
        const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive).catch((e: unknown) => e);
        expect(err).toBeInstanceOf(BlockDeviceError);
        expect((err as Error).message).toMatch(/did not come to match its table .*older layout still in use/);
        const middle = (await readFile(d!.file)).subarray(old.start, old.start + previous.length);
        expect(middle.equals(previous)).toBe(true);
      } finally {
        await holder.close();
      }
    });
  }, 90_000);

  it('adds a primary partition at the end of an MBR disk', async () => {
    await withLoops([160 * MiB], async ([d]) => {
      await execa('parted', ['-s', d!.path, 'mklabel', 'msdos', 'mkpart', 'primary', 'ext4', '1MiB', '33MiB']);
      const { partition } = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive);
      expect(partition).toBe(`${d!.path}p2`);
      expect((await blkid(partition)).LABEL).toBe('config-2');
      const { start, size } = await partitionBytes(d!.path, 2);
      expect(size).toBe(64 * MiB);
      expect(160 * MiB - (start + size)).toBeLessThan(MiB);
      expect(await table(d!.path)).toMatch(/NR="2".*TYPE="0xc"/);
    });
  });

  it('reuses an existing config-2 partition instead of adding one', async () => {
    await withLoops([200 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+32M', '-n', '2:0:+70M', d!.path]);
      await execa('partx', ['-u', d!.path]);
      const old = await buildIso({ 'openstack/latest/meta_data.json': '{"old": true}' });
      await execa('dd', [`of=${d!.path}p2`, 'bs=1M', 'conv=fsync', 'status=none'], { input: old });
      const before = await table(d!.path);
      const { partition } = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive);
      expect(partition).toBe(`${d!.path}p2`);
      expect(await table(d!.path)).toBe(before);
      const { start } = await partitionBytes(d!.path, 2);
      expect((await readFile(d!.file)).subarray(start, start + drive.bytes.length).equals(drive.bytes)).toBe(true);
    });
  });

  it('refuses an existing config-2 partition too small for the drive, leaving it as it was', async () => {
    const big = await prepareConfigDrive(
      diskServices([]),
      toWire(await buildIso({ 'openstack/latest/user_data': Buffer.alloc(3 * MiB, 1) })),
    );
    await withLoops([100 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+32M', '-n', '2:0:+2M', d!.path]);
      await execa('partx', ['-u', d!.path]);
      await execa('mkfs.vfat', ['-n', 'CONFIG-2', `${d!.path}p2`]);
      const { start, size } = await partitionBytes(d!.path, 2);
      const before = (await readFile(d!.file)).subarray(start, start + size);
      const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, big).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigDriveError);
      expect((err as Error).message).toMatch(/does not fit partition/);
      expect((await readFile(d!.file)).subarray(start, start + size).equals(before)).toBe(true);
    });
  });

  it('refuses an MBR disk with four primary partitions and leaves its table alone', async () => {
    await withLoops([200 * MiB], async ([d]) => {
      await fourMbrPrimaries(d!.path, [1, 10, 20, 30, 40]);
      const before = await table(d!.path);
      const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigDriveError);
      expect((err as Error).message).toMatch(/MBR partitioning and already has 4 primary partitions/);
      expect(await table(d!.path)).toBe(before);
    });
  });

  it('refuses a disk without room for the partition', async () => {
    await withLoops([100 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+60M', d!.path]);
      const before = await table(d!.path);
      const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigDriveError);
      expect((err as Error).message).toMatch(/No room for a 64 MiB config drive partition/);
      expect(await table(d!.path)).toBe(before);
    });
  });

  it('refuses a disk with no partition table', async () => {
    await withLoops([100 * MiB], async ([d]) => {
      const err = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigDriveError);
      expect((err as Error).message).toMatch(/no partition table/);
    });
  });

  it('refuses a disk the device guard does not allow', async () => {
    await withLoops([100 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+10M', d!.path]);
      const before = await table(d!.path);
      const err = await writeConfigDrivePartition(diskServices(['/dev/null-not-this-one']), d!.path, drive).catch(
        (e: unknown) => e,
      );
      expect(err).toBeInstanceOf(ProtectedDeviceError);
      expect(await table(d!.path)).toBe(before);
    });
  });

  it.each([
    ['GPT', (dev: string) => ['sgdisk', '-n', '1:0:+32M', dev]],
    ['MBR', (dev: string) => ['parted', '-s', dev, 'mklabel', 'msdos', 'mkpart', 'primary', 'ext4', '1MiB', '33MiB']],
  ])(
    'rebuilds the drive as VFAT labelled CONFIG-2 on a 4 KiB-sector %s disk, with the same files',
    async (_label, layout) => {
      await withLoops(
        [200 * MiB],
        async ([d]) => {
          const [tool, ...args] = layout(d!.path);
          await execa(tool!, args);
          const { partition } = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive);
          const id = await blkid(partition);
          expect(id.TYPE).toBe('vfat');
          expect(id.LABEL).toBe('CONFIG-2');
          expect(id.BLOCK_SIZE).toBe('4096');
          for (const [path, content] of Object.entries(DEFAULT_FILES)) {
            const { stdout } = await execa('mtype', ['-i', partition, `::/${path}`], {
              env: { MTOOLS_SKIP_CHECK: '1' },
            });
            expect(stdout).toBe(content.replace(/\n$/, ''));
          }
        },
        { sectorSize: 4096 },
      );
    },
  );

  it('rebuilds a VFAT drive with 512-byte sectors for a 4 KiB-sector disk', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-vfat-'));
    try {
      const fat = join(dir, 'fat.img');
      await execa('mkfs.vfat', ['-C', '-S', '512', '-n', 'CONFIG-2', fat, '4096']);
      await execa('mmd', ['-i', fat, '::/openstack', '::/openstack/latest'], { env: { MTOOLS_SKIP_CHECK: '1' } });
      await writeFile(join(dir, 'meta'), '{"uuid": "x"}');
      await execa('mcopy', ['-i', fat, join(dir, 'meta'), '::/openstack/latest/meta_data.json'], {
        env: { MTOOLS_SKIP_CHECK: '1' },
      });
      const vfatDrive = await prepareConfigDrive(diskServices([]), toWire(await readFile(fat)));
      expect(vfatDrive.sectorSize).toBe(512);
      await withLoops(
        [200 * MiB],
        async ([d]) => {
          await execa('sgdisk', ['-n', '1:0:+32M', d!.path]);
          const { partition } = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, vfatDrive);
          expect((await blkid(partition)).BLOCK_SIZE).toBe('4096');
          const { stdout } = await execa('mtype', ['-i', partition, '::/openstack/latest/meta_data.json'], {
            env: { MTOOLS_SKIP_CHECK: '1' },
          });
          expect(stdout).toBe('{"uuid": "x"}');
        },
        { sectorSize: 4096 },
      );
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('rebuilds an empty VFAT drive, and refuses one whose files mtools cannot read whole', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-vfat-'));
    const env = { MTOOLS_SKIP_CHECK: '1' };
    const asDrive = async (fat: string): Promise<ConfigDriveImage> => ({
      bytes: await readFile(fat),
      format: 'vfat',
      label: 'CONFIG-2',
      sectorSize: 512,
      source: 'inline',
    });
    try {
      const fat = join(dir, 'fat.img');
      await execa('mkfs.vfat', ['-C', '-S', '512', '-n', 'CONFIG-2', fat, '4096']);
      const empty = await rebuildAsVfat(await asDrive(fat), 8 * MiB, 4096);
      await writeFile(join(dir, 'rebuilt.img'), empty);
      expect((await execa('mdir', ['-b', '-i', join(dir, 'rebuilt.img'), '::/'], { env })).stdout).toBe('');
      // A file whose directory entry names a cluster past the FAT: mcopy writes it empty and exits 1.
      await writeFile(join(dir, 'user'), Buffer.alloc(5000, 9));
      await execa('mcopy', ['-i', fat, join(dir, 'user'), '::/USERDATA'], { env });
      const image = await readFile(fat);
      const entry = image.indexOf('USERDATA   ', 0, 'latin1');
      image.writeUInt16LE(0xfff0, entry + 26);
      await writeFile(fat, image);
      const err = await rebuildAsVfat(await asDrive(fat), 8 * MiB, 4096).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ConfigDriveError);
      expect((err as Error).message).toMatch(/^A failure occurred while re-creating the config drive as VFAT: .*mcopy/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('places the MBR partition within the 2 TiB MBR limit on a larger disk, 64 MiB exactly', async () => {
    await withLoops([3 * 1024 * 1024 * MiB], async ([d]) => {
      await execa('parted', ['-s', d!.path, 'mklabel', 'msdos', 'mkpart', 'primary', 'ext4', '1MiB', '100MiB']);
      const { partition } = await writeConfigDrivePartition(diskServices([d!.path]), d!.path, drive);
      expect((await blkid(partition)).LABEL).toBe('config-2');
      const { start, size } = await partitionBytes(d!.path, 2);
      expect(size).toBe(64 * MiB);
      expect(start + size).toBeLessThanOrEqual(2 ** 32 * 512);
      expect(2 ** 32 * 512 - (start + size)).toBeLessThan(MiB);
    });
  });
});
