// Erasing disks for cleaning. Metadata: every signature on every partition and on the disk, then the
// first and last MiB (both GPT copies, MBR, most RAID/LVM superblocks). The full erase of one disk is in
// erase-disk.ts. Each asks the device guard before its first write.
import { open } from 'node:fs/promises';
import type { AgentServices } from '../commands/types.ts';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { listPartitions, rescanPartitions } from './partitions.ts';
import { MiB } from './partition-table.ts';

async function zeroRange(fh: Awaited<ReturnType<typeof open>>, start: number, length: number): Promise<void> {
  const zeros = Buffer.alloc(Math.min(length, MiB));
  for (let at = start; at < start + length; at += zeros.length) {
    await fh.write(zeros, 0, Math.min(zeros.length, start + length - at), at);
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
    await fh.sync();
  } finally {
    await fh.close();
  }
}

type Services = Pick<AgentServices, 'guard' | 'log'>;

export async function eraseMetadata(services: Services, disk: string, sizeBytes: number): Promise<void> {
  const log = services.log;
  await services.guard.assertWritable(disk, 'erase the metadata of');
  try {
    await rescanPartitions(disk, log);
    for (const part of await listPartitions(disk, log)) {
      await run('wipefs', ['--force', '--all', part.path], { log });
    }
    await run('wipefs', ['--force', '--all', disk], { log });
    await zeroEnds(disk, sizeBytes);
    // The table is gone; drop the kernel's stale partitions (exit 1: there were none).
    await run('partx', ['-d', disk], { okCodes: [1], log });
    await run('blockdev', ['--flushbufs', disk], { log });
  } catch (err) {
    throw new BlockDeviceEraseError(`Error erasing block device ${disk} metadata: ${errorText(err)}`);
  }
}

