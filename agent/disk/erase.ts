// Erasing disks for cleaning. Metadata: every signature on every partition and on the disk, then the
// first and last MiB (both GPT copies, MBR, most RAID/LVM superblocks). Full erase: secure discard, else
// discard, else overwrite passes. Each asks the device guard before its first write.
import type { AgentServices } from '../services.ts';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { listPartitions, rescanPartitions } from './partitions.ts';
import { overwriteDevice } from './overwrite.ts';
import { clearSignatures } from './signatures.ts';
import type { ProgressMeter } from '../progress.ts';

type Services = Pick<AgentServices, 'guard' | 'log'>;

export async function eraseMetadata(services: Services, disk: string, sizeBytes: number): Promise<void> {
  const log = services.log;
  await services.guard.assertWritable(disk, 'erase the metadata of');
  try {
    await rescanPartitions(disk, log);
    const partitions = (await listPartitions(disk, log)).map((p) => p.path);
    await clearSignatures(disk, sizeBytes, services.guard, log, partitions);
    // The table is gone; drop the kernel's stale partitions (exit 1: there were none).
    await run('partx', ['-d', disk], { okCodes: [1], log });
    await run('blockdev', ['--flushbufs', disk], { log });
  } catch (err) {
    throw new BlockDeviceEraseError(`Error erasing block device ${disk} metadata: ${errorText(err)}`);
  }
}

export interface EraseOptions {
  discard: boolean;
  randomPasses: number;
  finalZeroPass: boolean;
}

/** How the disk was erased, for the step's log and result. */
export type EraseMethod = 'secure discard' | 'discard' | 'overwrite';

/** Erases `disk`; `meter` hears which method runs and, while overwriting, each pass's progress. */
export async function eraseDevice(services: Services, disk: string, sizeBytes: number, opts: EraseOptions, meter: ProgressMeter): Promise<EraseMethod> {
  const log = services.log;
  await services.guard.assertWritable(disk, 'erase');
  if (opts.discard) {
    for (const [method, args] of [['secure discard', ['-s', disk]], ['discard', [disk]]] as const) {
      // blkdiscard reports nothing while it runs: no byte count to show, only what is happening.
      meter.start(method, null, { device: disk });
      try {
        await run('blkdiscard', args, { log, timeoutMs: 0 });
        return method;
      } catch (err) {
        log.info({ disk, method, err: errorText(err) }, 'discard not possible, trying the next method');
      }
    }
  }
  // Nothing asked for at all still leaves the disk zeroed: an erase step must erase.
  const zero = opts.finalZeroPass || opts.randomPasses === 0;
  try {
    let pass = 0;
    await overwriteDevice(disk, sizeBytes, opts.randomPasses, zero, (p) => {
      if (p.pass !== pass) {
        pass = p.pass;
        const kind = pass <= opts.randomPasses ? 'random' : 'zeros';
        meter.start('overwrite', p.total, { device: disk, pass, passes: p.passes, data: kind });
      }
      meter.set(p.bytes);
    });
  } catch (err) {
    throw new BlockDeviceEraseError(`Error erasing block device ${disk}: ${errorText(err)}`);
  }
  return 'overwrite';
}
