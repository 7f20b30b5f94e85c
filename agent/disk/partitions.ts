// A disk's partitions as the kernel sees them, and how to make the kernel see a changed table without
// udev: ask for a re-read, then poll /sys until the expected partition nodes exist.
import { stat } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from '../log.ts';
import { BlockDeviceError } from '../errors.ts';
import { run } from '../exec.ts';
import { probe, type Probe } from './blkid.ts';
import { readSys } from '../host/sysfs.ts';
import { kernelNameOf, partitionName, sysPartitions, SYS_BLOCK } from './sysfs.ts';

export interface Partition extends Probe {
  number: number;
  name: string;
  path: string;
  /** Bytes. */
  start: number;
  size: number;
}

/** The device paths of every partition of `disk` the kernel knows, without probing them. */
export async function partitionPaths(disk: string): Promise<string[]> {
  return (await sysPartitions(kernelNameOf(disk))).map((name) => `/dev/${name}`);
}

/** Every partition of `disk` the kernel knows, with its blkid identity. */
export async function listPartitions(disk: string, log?: Logger): Promise<Partition[]> {
  const diskName = kernelNameOf(disk);
  const out: Partition[] = [];
  for (const name of await sysPartitions(diskName)) {
    const sys = `${SYS_BLOCK}/${diskName}/${name}`;
    const path = `/dev/${name}`;
    out.push({
      number: Number(await readSys(`${sys}/partition`)),
      name,
      path,
      start: Number(await readSys(`${sys}/start`)) * 512,
      size: Number(await readSys(`${sys}/size`)) * 512,
      ...(await probe(path, log)),
    });
  }
  return out;
}

async function isBlockDevice(path: string): Promise<boolean> {
  try {
    return (await stat(path)).isBlockDevice();
  } catch {
    return false;
  }
}

/** A partition to wait for: its number, and where the table puts it (bytes), which the kernel's must match. */
export interface ExpectedPartition {
  number: number;
  start: number;
  size: number;
}

/**
 * Makes the kernel's partition list match the on-disk table, and waits until the node of every partition
 * in `expect` exists (and, given its place, the kernel has it there: a partition of the old table that is
 * still in use keeps its number and its old place, and writing through its node would land elsewhere).
 * `partx -u` updates partitions one by one (BLKPG), which works even when the disk is busy or the
 * whole-table re-read (BLKRRPART) is refused; the re-read is the fallback. `synced`: the caller flushed its
 * own writes already, so the system-wide `sync` first is not needed.
 */
export async function rescanPartitions(
  disk: string,
  log?: Logger,
  expect: (number | ExpectedPartition)[] = [],
  opts: { synced?: boolean; onlyExpected?: boolean } = {},
): Promise<void> {
  if (!opts.synced) await run('sync', [], { log });
  const diskName = kernelNameOf(disk);
  const wanted = new Set(expect.map((e) => (typeof e === 'number' ? e : e.number)));
  const ready = async (): Promise<boolean> => {
    // `onlyExpected`: also wait until the kernel has let go of partitions the table no longer has (one that
    // something held for a moment, a udev probe, keeps its node until the next re-read).
    if (opts.onlyExpected) {
      for (const name of await sysPartitions(diskName)) {
        if (!wanted.has(Number(await readSys(`${SYS_BLOCK}/${diskName}/${name}/partition`)))) return false;
      }
    }
    for (const e of expect) {
      const name = partitionName(diskName, typeof e === 'number' ? e : e.number);
      const sys = `${SYS_BLOCK}/${diskName}/${name}`;
      if ((await readSys(`${sys}/partition`)) === null) return false;
      if (!(await isBlockDevice(`/dev/${name}`))) return false;
      // sysfs counts 512-byte units whatever the sector size.
      if (typeof e !== 'number') {
        if (Number(await readSys(`${sys}/start`)) * 512 !== e.start) return false;
        if (Number(await readSys(`${sys}/size`)) * 512 !== e.size) return false;
      }
    }
    return true;
  };
  const attempts: [string, string[]][] = [
    ['partx', ['-u', disk]],
    ['blockdev', ['--rereadpt', disk]],
    ['partx', ['-a', disk]],
  ];
  const errors: string[] = [];
  for (let round = 0; round < 20; round++) {
    const [tool, args] = attempts[round % attempts.length]!;
    await run(tool, args, { log }).catch((err: Error) => errors.push(err.message));
    for (let i = 0; i < 5; i++) {
      if (await ready()) return;
      await sleep(100);
    }
  }
  const want = expect.map((e) => `/dev/${partitionName(diskName, typeof e === 'number' ? e : e.number)}`).join(', ');
  throw new BlockDeviceError(
    `the partitions of ${disk} (${want || 'none'}) did not come to match its table after re-reading it (is a partition of an older layout still in use?)${errors.length ? `: ${errors.at(-1)}` : ''}`,
  );
}

/** The partition-table type of a disk: `gpt`, `dos`, or null when there is none. */
export async function tableType(disk: string, log?: Logger): Promise<'gpt' | 'dos' | null> {
  const t = (await probe(disk, log)).ptType;
  return t === 'gpt' || t === 'dos' ? t : null;
}
