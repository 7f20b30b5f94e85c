// The steps around writing an image (the sinks write the bytes): clearing old signatures first,
// relocating the backup GPT and re-reading the partition table after.
import { open, type FileHandle } from 'node:fs/promises';
import { ImageWriteError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { relocateBackupGpt } from './gpt.ts';
import type { Logger } from '../log.ts';
import type { DeviceGuard } from '../safety/device-guard.ts';

const MiB = 1024 * 1024;

async function openDevice(path: string, guard: DeviceGuard): Promise<FileHandle> {
  await guard.assertWritable(path, 'write to');
  try {
    return await open(path, 'r+');
  } catch (err) {
    throw new ImageWriteError(`cannot open ${path} for writing: ${errorText(err)}`);
  }
}

/**
 * Clears partition-table and filesystem signatures, and zeroes the first and last MiB, so that nothing of
 * an older, larger layout (a backup GPT at the disk's end, RAID or LVM labels) survives the new image.
 */
export async function clearSignatures(device: string, sizeBytes: number, guard: DeviceGuard, log: Logger): Promise<void> {
  await guard.assertWritable(device, 'clear the signatures of');
  await run('wipefs', ['--all', '--force', device], { log });
  const fh = await openDevice(device, guard);
  try {
    const zeros = Buffer.alloc(Math.min(MiB, sizeBytes));
    await fh.write(zeros, 0, zeros.length, 0);
    await fh.write(zeros, 0, zeros.length, sizeBytes - zeros.length);
    await fh.datasync();
  } finally {
    await fh.close();
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
        for (const w of writes) await fh.write(w.data, 0, w.data.length, w.offset);
        await fh.datasync();
      } finally {
        await fh.close();
      }
    } else {
      await run('sgdisk', ['-e', device.path], { log }).catch((err) => log.warn({ device: device.path, err: errorText(err) }, 'sgdisk -e failed'));
    }
  }
  await rereadPartitions(device.path, log);
}

export async function rereadPartitions(device: string, log: Logger): Promise<void> {
  try {
    await run('blockdev', ['--rereadpt', device], { log });
  } catch {
    await run('partprobe', [device], { log }).catch((err) => log.warn({ device, err: errorText(err) }, 'partprobe failed'));
  }
}

/** Whether a disk image's head holds a GPT header (at LBA 1 for 512-byte or 4 KiB sectors). */
export function headHasGpt(head: Buffer): boolean {
  return [512, 4096].some((at) => head.subarray(at, at + 8).toString('latin1') === 'EFI PART');
}
