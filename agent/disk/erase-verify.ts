// Reading an erased disk back. Before each method runs, the sample regions are overwritten with random bytes
// (canaries), and read back after it: the first and last MiB and 16 regions of 64 KiB at offsets drawn from a
// seeded generator (the seed is logged and reported, so a check can be repeated). A method that promises zeros
// must leave every sampled byte zero; one that leaves unpredictable data (crypto erase, a random last pass) must
// leave no 4 KiB block that is non-zero and still the canary. Without canaries, a method that did nothing would
// pass wherever the samples held zeros already (a mostly empty disk); with them it cannot (docs/erase.md).
import { randomFillSync } from 'node:crypto';
import { open } from 'node:fs/promises';
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';
import { seededRandom } from '../seeded-random.ts';

const MiB = 1024 * 1024;
const EDGE = MiB;
const RANDOM_REGIONS = 16;
const REGION = 64 * 1024;
const BLOCK = 4096;

export interface Region {
  offset: number;
  length: number;
}

export interface SamplePlan {
  seed: number;
  regions: Region[];
}

export type Expectation = 'zeros' | 'changed';

export interface Verification {
  ok: boolean;
  expect: Expectation;
  seed: number;
  regions: number;
  bytes_read: number;
  /** Where the first offending 4 KiB block was, and why. */
  failure: string | null;
}

export function samplePlan(sizeBytes: number, seed: number): SamplePlan {
  const regions: Region[] = [{ offset: 0, length: Math.min(EDGE, sizeBytes) }];
  if (sizeBytes > EDGE) {
    const tail = Math.max(EDGE, sizeBytes - EDGE);
    regions.push({ offset: tail, length: sizeBytes - tail });
  }
  const next = seededRandom(seed);
  const slots = Math.floor((sizeBytes - REGION) / BLOCK);
  for (let i = 0; i < RANDOM_REGIONS && slots > 0; i++) {
    const offset = Math.floor(next() * (slots + 1)) * BLOCK;
    regions.push({ offset, length: Math.min(REGION, sizeBytes - offset) });
  }
  return { seed, regions };
}

/**
 * Reads the regions. The kernel's cached pages are dropped first: a format or security erase sent as a
 * command bypasses the page cache, which would otherwise still hold the old data.
 */
export async function readSamples(disk: string, plan: SamplePlan, log?: Logger): Promise<Buffer[]> {
  await run('blockdev', ['--flushbufs', disk], { log });
  const fh = await open(disk, 'r');
  try {
    const out: Buffer[] = [];
    for (const r of plan.regions) {
      const buf = Buffer.alloc(r.length);
      const { bytesRead } = await fh.read(buf, 0, r.length, r.offset);
      if (bytesRead !== r.length)
        throw new Error(`short read of ${disk} at ${r.offset}: ${bytesRead} of ${r.length} bytes`);
      out.push(buf);
    }
    return out;
  } finally {
    await fh.close();
  }
}

/**
 * Writes random bytes over every sample region and makes them durable; returns them, for `judge`. Called only
 * right before a method runs: a step that stops before any method leaves the disk as it was.
 */
export async function plantCanaries(disk: string, plan: SamplePlan): Promise<Buffer[]> {
  const fh = await open(disk, 'r+');
  try {
    const out: Buffer[] = [];
    for (const r of plan.regions) {
      const canary = randomFillSync(Buffer.alloc(r.length));
      const { bytesWritten } = await fh.write(canary, 0, r.length, r.offset);
      if (bytesWritten !== r.length)
        throw new Error(`short write to ${disk} at ${r.offset}: ${bytesWritten} of ${r.length} bytes`);
      out.push(canary);
    }
    await fh.datasync();
    return out;
  } finally {
    await fh.close();
  }
}

const allZero = (b: Buffer): boolean => b.every((x) => x === 0);

/** Judges the samples read after a method against the canaries planted before it. */
export function judge(plan: SamplePlan, canaries: Buffer[], after: Buffer[], expect: Expectation): Verification {
  let failure: string | null = null;
  let bytes = 0;
  plan.regions.forEach((r, i) => {
    const now = after[i]!;
    bytes += now.length;
    for (let at = 0; at < now.length && !failure; at += BLOCK) {
      const block = now.subarray(at, at + BLOCK);
      if (allZero(block)) continue;
      if (expect === 'zeros') failure = `non-zero data at byte ${r.offset + at}`;
      else if (block.equals(canaries[i]!.subarray(at, at + BLOCK)))
        failure = `the data at byte ${r.offset + at} is unchanged`;
    }
  });
  return { ok: failure === null, expect, seed: plan.seed, regions: plan.regions.length, bytes_read: bytes, failure };
}
