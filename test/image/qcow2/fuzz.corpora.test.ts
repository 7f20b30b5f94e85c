// Bounded fuzz of the streaming qcow2 reader: a fixed number of images (fixed seed) made from real qemu-img
// images by mutating their headers and tables, read into memory. Every case must end in either the bytes
// `qemu-img convert -O raw` gives for the same file, or a clear refusal (an IPA wire error); never a crash
// of another kind, and never a write outside [0, virtual size) (the memory target throws on one). The reader
// runs every case first; qemu-img then reads the distinct accepted ones, several per run.
import { createHash } from 'node:crypto';
import { readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentError } from '../../../agent/errors.ts';
import { inspectImage } from '../../../agent/image/inspect.ts';
import { workDir } from '../../helpers/make-image.ts';
import { buildImage, content, KiB, MiB, readIntoMemory, rng, type Spec } from '../../helpers/qcow2-corpus.ts';

/** Fixed, like the seed: 4 × 500 cases, a few seconds each on an idle 2-core machine. */
const CASES_PER_IMAGE = 500;
/** Accepted mutants qemu-img reads in one run. */
const QEMU_BATCH = 16;
const DEVICE = 4 * MiB;

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await workDir('ina-qcow2-fuzz-')));
afterAll(async () => cleanup());

// Small images: a case costs in proportion to the virtual size, and the tables' shapes do not need more.
const writes = [
  { offset: 384 * KiB + 512, length: 40 * KiB },
  { offset: 0, length: 8 * KiB },
  { offset: 640 * KiB, length: 64 * KiB, zero: true },
  { offset: 1 * MiB - 4096, length: 4096 },
];
const bases: Spec[] = [
  { name: 'c512', virtualSize: 1 * MiB, options: 'cluster_size=512', writes },
  { name: 'c64k', virtualSize: 1 * MiB, writes },
  { name: 'zlib', virtualSize: 0, options: 'cluster_size=4096', convert: { raw: content(1 * MiB, 4), compress: true } },
  {
    name: 'zstd-extl2',
    virtualSize: 1 * MiB,
    options: 'cluster_size=16384,extended_l2=on,compression_type=zstd',
    writes: [...writes, { offset: 256 * KiB, length: 64 * KiB, compressed: true }],
  },
];

/** Byte ranges worth mutating: the header, the L1 table and the L2 tables it names. */
function tableRanges(image: Buffer): [number, number][] {
  const clusterSize = 2 ** image.readUInt32BE(20);
  const l1 = Number(image.readBigUInt64BE(40));
  const l1Size = image.readUInt32BE(36);
  const ranges: [number, number][] = [
    [0, 112],
    [l1, l1 + l1Size * 8],
  ];
  for (let i = 0; i < l1Size; i++) {
    const l2 = Number(image.readBigUInt64BE(l1 + i * 8) & 0x00fffffffffffe00n);
    if (l2 > 0) ranges.push([l2, l2 + clusterSize]);
  }
  return ranges;
}

function mutate(image: Buffer, ranges: [number, number][], r: () => number): Buffer {
  const out = Buffer.from(image);
  const edits = 1 + Math.floor(r() * 3);
  for (let e = 0; e < edits; e++) {
    const [start, end] = ranges[Math.floor(r() * ranges.length)]!;
    const at = start + Math.floor(r() * (end - start));
    const op = Math.floor(r() * 5);
    if (op === 0) out[at] = Math.floor(r() * 256);
    else if (op === 1) out[at] = out[at]! ^ (1 << Math.floor(r() * 8));
    else if (op === 2) out[at] = 0xff;
    else if (op === 3) out[at] = 0;
    else {
      // An entry copied over another: two claims on one cluster, or a table pointing at a table.
      const from = start + Math.floor((r() * (end - start)) / 8) * 8;
      out.copy(out, at - (at % 8), from, Math.min(from + 8, out.length));
    }
  }
  return out;
}

/**
 * qemu-img's reading of `files`, one after another (convert takes several sources): raw bytes, or null if it refuses
 * one.
 */
async function qemuReads(files: string[]): Promise<Buffer | null> {
  const raw = `${files[0]}.raw`;
  const q = await execa('qemu-img', ['convert', '-t', 'unsafe', '-f', 'qcow2', '-O', 'raw', ...files, raw], {
    reject: false,
    timeout: 60_000,
  });
  const bytes = q.exitCode === 0 ? await readFile(raw) : null;
  await rm(raw, { force: true });
  return bytes;
}

interface Accepted {
  index: number;
  file: string;
  /** What the reader wrote. */
  bytes: Buffer;
}

/**
 * The cases qemu-img disagrees with: each batch in one qemu-img run (its start-up, not its work, is most of
 * a case's cost), and only a batch that does not match as a whole is looked at case by case.
 */
async function disagreements(cases: Accepted[]): Promise<string[]> {
  const out: string[] = [];
  for (let at = 0; at < cases.length; at += QEMU_BATCH) {
    const batch = cases.slice(at, at + QEMU_BATCH);
    const theirs = await qemuReads(batch.map((c) => c.file));
    if (theirs?.equals(Buffer.concat(batch.map((c) => c.bytes)))) continue;
    for (const c of batch) {
      const one = await qemuReads([c.file]);
      if (one === null) out.push(`case ${c.index}: qemu-img refused what the reader accepted`);
      else if (!one.equals(c.bytes)) out.push(`case ${c.index}: bytes differ from qemu-img's`);
    }
  }
  return out;
}

describe('qcow2 reader fuzz (fixed seed)', () => {
  it.each(bases.map((b) => [b.name, b] as const))('%s', async (_name, spec) => {
    const image = await readFile(await buildImage(dir, spec));
    const ranges = tableRanges(image);
    const r = rng(0x5eed + spec.name.length);
    let refused = 0;
    const accepted = new Map<string, Accepted>();
    for (let i = 0; i < CASES_PER_IMAGE; i++) {
      const mutant = mutate(image, ranges, r);
      try {
        const found = inspectImage(mutant.subarray(0, 64 * KiB));
        if (found.unsafe.length > 0 || found.format !== 'qcow2') throw new AgentError('refused by inspection');
        const { bytes } = (
          await readIntoMemory(mutant, { deviceSize: DEVICE, spoolBudget: 8 * MiB, seed: i, downloaded: true })
        ).target;
        // A mutant seen before (the same edit twice) is checked against qemu-img once.
        const key = createHash('sha1').update(mutant).digest('hex');
        if (accepted.has(key)) continue;
        const file = join(dir, `${spec.name}.${i}.mutant`);
        await writeFile(file, mutant);
        accepted.set(key, { index: i, file, bytes });
      } catch (err) {
        if (!(err instanceof AgentError)) throw new Error(`case ${i}: not a clear refusal: ${(err as Error).stack}`);
        refused++;
      }
    }
    // Accepted by the reader: qemu-img must read the same file, and to the same bytes.
    expect(await disagreements([...accepted.values()])).toEqual([]);
    console.log(
      `${spec.name}: ${CASES_PER_IMAGE} cases, ${refused} refused, ${accepted.size} distinct accepted ones matched qemu-img`,
    );
    expect(refused).toBeLessThan(CASES_PER_IMAGE);
  });
});
