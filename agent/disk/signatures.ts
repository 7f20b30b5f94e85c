// Clearing a disk's old identity: every signature wipefs knows (on the disk and on the partitions named),
// then the first and last MiB, where both GPT copies, the MBR and most RAID/LVM superblocks live. Used before
// and after an image write (nothing of an older, larger layout survives; a failed write leaves nothing that
// boots) and by the metadata erase of cleaning.
import { open } from 'node:fs/promises';
import { run } from '../exec.ts';
import { writeAll } from '../host/write-all.ts';
import type { Logger } from '../log.ts';
import type { DeviceGuard } from '../safety/device-guard.ts';

const MiB = 1024 * 1024;

async function zeroRange(fh: Awaited<ReturnType<typeof open>>, start: number, length: number): Promise<void> {
  const zeros = Buffer.alloc(Math.min(length, MiB));
  for (let at = start; at < start + length; at += zeros.length) {
    await writeAll(fh, zeros, 0, Math.min(zeros.length, start + length - at), at);
  }
}

/** Zeroes the first and last MiB of `disk` (all of it when smaller than 2 MiB) and flushes. */
async function zeroEnds(disk: string, sizeBytes: number): Promise<void> {
  const fh = await open(disk, 'r+');
  try {
    const head = Math.min(MiB, sizeBytes);
    await zeroRange(fh, 0, head);
    const tailStart = Math.max(head, sizeBytes - MiB);
    await zeroRange(fh, tailStart, sizeBytes - tailStart);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** wipefs on each of `partitions`, then on `disk`, then its ends zeroed; the guard is asked first. */
export async function clearSignatures(
  disk: string,
  sizeBytes: number,
  guard: DeviceGuard,
  log: Logger,
  partitions: readonly string[] = [],
): Promise<void> {
  await guard.assertWritable(disk, 'clear the signatures of');
  for (const part of partitions) await run('wipefs', ['--force', '--all', part], { log });
  await run('wipefs', ['--force', '--all', disk], { log });
  await zeroEnds(disk, sizeBytes);
}
