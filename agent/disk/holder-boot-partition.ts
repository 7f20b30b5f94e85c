// A boot partition added to a software RAID holder when the boot loader is installed (IPA's way: the ESP under
// UEFI, the BIOS boot partition on GPT), in the room the RAID layout kept in front of the RAID partitions. One way
// to add it for both: placed without touching the disk, the guard asked, one sgdisk call, the kernel made to see it.
import { SoftwareRAIDError } from '../errors.ts';
import { run } from '../exec.ts';
import type { TaskContext } from '../services.ts';
import { listPartitions, rescanPartitions, type Partition } from './partitions.ts';
import { placeInFront, type BootMode } from './raid-layout.ts';
import { logicalSectorSize } from './sysfs.ts';

export interface BootPartitionSpec {
  /** How messages name it (`EFI system partition`). */
  what: string;
  /** Bytes from the disk's start, and its size. */
  start: number;
  size: number;
  /** sgdisk's type code (`ef00`) and the GPT partition name. */
  type: string;
  label: string;
  /** The boot mode whose layout has a partition in this room instead. */
  otherMode: BootMode;
}

/** Adds the partition to `holder` (given its current partitions) and returns it as the kernel now sees it. */
export async function addBootPartition(
  ctx: TaskContext,
  holder: string,
  parts: readonly Partition[],
  spec: BootPartitionSpec,
): Promise<Partition> {
  const at = placeInFront(holder, parts, await logicalSectorSize(holder), spec);
  await ctx.guard.assertPartitionAddable(holder, `add a ${spec.what} to`);
  await run(
    'sgdisk',
    [
      '-n',
      `${at.number}:${at.firstSector}:${at.lastSector}`,
      '-t',
      `${at.number}:${spec.type}`,
      '-c',
      `${at.number}:${spec.label}`,
      holder,
    ],
    { log: ctx.log },
  );
  await rescanPartitions(holder, ctx.log, [at.number]);
  const made = (await listPartitions(holder, ctx.log)).find((p) => p.number === at.number);
  if (!made) throw new SoftwareRAIDError(`The ${spec.what} ${at.number} made on ${holder} did not appear`);
  return made;
}
