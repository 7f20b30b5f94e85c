// Erasing disks for cleaning. Metadata: every signature on every partition and on the disk, then the
// first and last MiB (both GPT copies, MBR, most RAID/LVM superblocks). The full erase of one disk is in
// erase-disk.ts. Each asks the device guard before its first write.
import type { AgentServices } from '../services.ts';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { partitionPaths, rescanPartitions } from './partitions.ts';
import { clearSignatures } from './signatures.ts';

type Services = Pick<AgentServices, 'guard' | 'log'>;

export async function eraseMetadata(services: Services, disk: string, sizeBytes: number): Promise<void> {
  const log = services.log;
  await services.guard.assertWritable(disk, 'erase the metadata of');
  try {
    await rescanPartitions(disk, log);
    await clearSignatures(disk, sizeBytes, services.guard, log, await partitionPaths(disk));
    // The table is gone; drop the kernel's stale partitions (exit 1: there were none).
    await run('partx', ['-d', disk], { okCodes: [1], log });
    await run('blockdev', ['--flushbufs', disk], { log });
  } catch (err) {
    throw new BlockDeviceEraseError(`Error erasing block device ${disk} metadata: ${errorText(err)}`);
  }
}
