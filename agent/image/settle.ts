// After an image is on the device: flushing the device's cache (after a tool wrote it with O_DIRECT),
// relocating the backup GPT to the disk's real end and making the kernel read the new table.
import { open, type FileHandle } from 'node:fs/promises';
import { ImageWriteError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { writeAll } from '../host/write-all.ts';
import { rescanPartitions } from '../disk/partitions.ts';
import { relocateBackupGpt } from './gpt.ts';
import type { Logger } from '../log.ts';
import type { DeviceGuard } from '../safety/device-guard.ts';

async function openDevice(path: string, guard: DeviceGuard): Promise<FileHandle> {
  await guard.assertWritable(path, 'write to');
  try {
    return await open(path, 'r+');
  } catch (err) {
    throw new ImageWriteError(`cannot open ${path} for writing: ${errorText(err)}`);
  }
}

/** Flushes the device's own write cache, after a tool wrote it with O_DIRECT. */
export async function flushDevice(device: string, guard: DeviceGuard): Promise<void> {
  const fh = await openDevice(device, guard);
  try {
    await fh.datasync();
  } catch (err) {
    throw new ImageWriteError(`flushing ${device} failed: ${errorText(err)}`);
  } finally {
    await fh.close();
  }
}

/**
 * After a raw write: when the image has a GPT, move its backup to the real end of the disk (computed from
 * the image's head; `sgdisk -e` when the head does not hold the whole table), then re-read the table.
 */
export async function settlePartitionTable(
  device: { path: string; size: number; logicalSectorSize: number },
  head: Buffer,
  guard: DeviceGuard,
  log: Logger,
): Promise<void> {
  if (headHasGpt(head)) {
    await guard.assertWritable(device.path, 'relocate the backup GPT on');
    const writes = relocateBackupGpt(head, device.logicalSectorSize, device.size);
    if (writes) {
      const fh = await openDevice(device.path, guard);
      try {
        for (const w of writes) await writeAll(fh, w.data, 0, w.data.length, w.offset);
        await fh.datasync();
      } finally {
        await fh.close();
      }
    } else {
      await run('sgdisk', ['-e', device.path], { log }).catch((err) =>
        log.warn({ device: device.path, err: errorText(err) }, 'sgdisk -e failed'),
      );
    }
  }
  // Every sink synced the device when it finished.
  await rescanPartitions(device.path, log, [], { synced: true });
}

/** Whether a disk image's head holds a GPT header (at LBA 1 for 512-byte or 4 KiB sectors). */
export function headHasGpt(head: Buffer): boolean {
  return [512, 4096].some((at) => head.subarray(at, at + 8).toString('latin1') === 'EFI PART');
}
