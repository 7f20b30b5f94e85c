// readPartitionUuids on whole-disk layouts made with parted/sgdisk: the MBR disk identifier as `root uuid`
// (checked against blkid's PTUUID), and the ESP's filesystem UUID when there is one.
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { readPartitionUuids } from '../../agent/disk/partition-uuids.ts';
import { diskServices } from '../helpers/configdrive.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

const blkidValue = async (dev: string, key: string) =>
  (await execa('blkid', ['-p', '-s', key, '-o', 'value', dev])).stdout.trim();

describe('readPartitionUuids', () => {
  it('reports the MBR disk identifier of an msdos disk as root uuid', async () => {
    await withLoops([64 * MiB], async ([d]) => {
      await execa('parted', ['-s', d!.path, 'mklabel', 'msdos', 'mkpart', 'primary', 'ext4', '1MiB', '20MiB']);
      const uuids = await readPartitionUuids(diskServices([d!.path]), d!.path);
      const ptuuid = await blkidValue(d!.path, 'PTUUID');
      expect(uuids).toEqual({ 'root uuid': `0x${ptuuid}` });
      expect(uuids['root uuid']).not.toBe('0x00000000');
    });
  });

  it('reports the GPT protective MBR identifier and the ESP filesystem UUID', async () => {
    await withLoops([64 * MiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+33M', '-t', '1:ef00', '-n', '2:0:+8M', d!.path]);
      await execa('partx', ['-u', d!.path]);
      await execa('mkfs.vfat', ['-F', '32', '-n', 'EFI', `${d!.path}p1`]);
      const uuids = await readPartitionUuids(diskServices([d!.path]), d!.path);
      expect(uuids['root uuid']).toMatch(/^0x[0-9a-f]{8}$/);
      expect(uuids['efi system partition uuid']).toBe(await blkidValue(`${d!.path}p1`, 'UUID'));
    });
  });
});
