// The streaming qcow2 reader against qemu-img itself: every image here is built with qemu-img/qemu-io, read
// by the reader into memory in chunks of varying size, and compared byte for byte with `qemu-img convert -O
// raw`. Every guest byte must be written exactly once (the memory starts as 0xa5, and the count must match).
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { freeDownloaded, markDownloaded } from '../../../agent/image/downloaded-chunks.ts';
import { parseQcow2Header } from '../../../agent/image/qcow2/header.ts';
import { Qcow2Reader } from '../../../agent/image/qcow2/reader.ts';
import { workDir } from '../../helpers/make-image.ts';
import {
  buildImage,
  content,
  KiB,
  MemoryTarget,
  MiB,
  readIntoMemory,
  referenceRaw,
  type Spec,
} from '../../helpers/qcow2-corpus.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await workDir('ina-qcow2-')));
afterAll(async () => cleanup());

/** Half data, half holes, at an odd size. */
function halfData(size: number, seed: number): Buffer {
  const raw = content(size, seed);
  for (let at = 0; at < size; at += 256 * KiB) raw.fill(0, at + 128 * KiB, Math.min(size, at + 256 * KiB));
  return raw;
}

const scattered = (cluster: number) => [
  { offset: 7 * MiB, length: 3 * cluster + 512 },
  { offset: 3 * MiB + cluster, length: 200 * KiB },
  { offset: 0, length: 64 * KiB },
  { offset: 12 * MiB, length: 2 * cluster, zero: true },
  { offset: 9 * MiB, length: 1 * MiB },
  { offset: 15 * MiB, length: 512 },
];

const specs: Spec[] = [];
for (const cluster of [512, 4 * KiB, 64 * KiB, 2 * MiB]) {
  specs.push({
    name: `convert-${cluster}`,
    virtualSize: 0,
    options: `cluster_size=${cluster}`,
    convert: { raw: halfData(6 * MiB + 3 * 512, cluster) },
  });
  specs.push({
    name: `scattered-${cluster}`,
    virtualSize: 16 * MiB + 1536,
    options: `cluster_size=${cluster}`,
    writes: scattered(cluster),
  });
  specs.push({
    name: `zlib-${cluster}`,
    virtualSize: 0,
    options: `cluster_size=${cluster}`,
    convert: { raw: halfData(3 * MiB, cluster + 1), compress: true },
  });
  specs.push({
    name: `zstd-${cluster}`,
    virtualSize: 0,
    options: `cluster_size=${cluster},compression_type=zstd`,
    convert: { raw: halfData(3 * MiB, cluster + 2), compress: true },
  });
  specs.push({
    name: `resized-${cluster}`,
    virtualSize: 4 * MiB,
    options: `cluster_size=${cluster}`,
    writes: scattered(cluster).filter((w) => w.offset < 4 * MiB),
    resizeTo: 40 * MiB,
  });
}
for (const cluster of [16 * KiB, 64 * KiB, 2 * MiB]) {
  specs.push({
    name: `extl2-${cluster}`,
    virtualSize: 16 * MiB + 1536,
    options: `cluster_size=${cluster},extended_l2=on`,
    writes: scattered(cluster),
  });
  specs.push({
    name: `extl2-zstd-${cluster}`,
    virtualSize: 0,
    options: `cluster_size=${cluster},extended_l2=on,compression_type=zstd`,
    convert: { raw: halfData(3 * MiB, 5), compress: true },
  });
}
specs.push({ name: 'lazy', virtualSize: 16 * MiB, options: 'lazy_refcounts=on', writes: scattered(64 * KiB) });
for (const prealloc of ['metadata', 'falloc', 'full']) {
  specs.push({
    name: `prealloc-${prealloc}`,
    virtualSize: 8 * MiB + 512,
    options: `preallocation=${prealloc}`,
    writes: scattered(64 * KiB).filter((w) => w.offset < 8 * MiB),
  });
}
specs.push({
  name: 'compressed-writes',
  virtualSize: 16 * MiB,
  writes: [
    { offset: 5 * MiB, length: 256 * KiB, compressed: true },
    { offset: 64 * KiB, length: 128 * KiB, compressed: true },
    { offset: 9 * MiB, length: 64 * KiB },
  ],
});
specs.push({ name: 'empty', virtualSize: 5 * MiB });
specs.push({ name: 'dense', virtualSize: 0, convert: { raw: content(4 * MiB, 9) } });
specs.push({
  name: 'v2',
  virtualSize: 8 * MiB,
  options: 'compat=0.10',
  writes: scattered(64 * KiB).filter((w) => w.offset < 8 * MiB),
});

describe('streaming qcow2 reader vs qemu-img convert -O raw', () => {
  it.each(specs.map((s) => [s.name, s] as const))('%s', async (_name, spec) => {
    const file = await buildImage(dir, spec);
    const image = await readFile(file);
    const reference = await referenceRaw(file, dir);
    // Seed 2 feeds fresh chunks marked as downloaded, which the reader frees once done with them, as it does a
    // socket's reads: one freed while a piece of it still waits for the rest of its cluster would spoil the bytes.
    for (const seed of [1, 2]) {
      const { target, freed } = await readIntoMemory(image, { seed, downloaded: seed === 2 });
      expect(target.size).toBe(reference.length);
      expect(target.written).toBe(reference.length);
      expect(target.bytes.equals(reference)).toBe(true);
      if (seed === 2 && image.length > 1 * MiB) expect(freed).toBeGreaterThan(0);
    }
  });
});

describe('the spool holds only what came before its table', () => {
  it('a packed image (qemu-img convert -c) whose compressed clusters run across host clusters keeps next to nothing', async () => {
    // Half-compressible bytes (16 symbols): each compressed cluster takes about half a host cluster, so most
    // host clusters end inside a range that runs on into the next. 4 KiB clusters: an L2 table maps 2 MiB,
    // so the 24 MiB image has twelve tables spread through the file, as a cloud image's are.
    const raw = content(24 * MiB, 11);
    for (let i = 0; i < raw.length; i++) raw[i] = 0x41 + (raw[i]! & 15);
    const spec: Spec = {
      name: 'packed-spanning',
      virtualSize: 0,
      options: 'cluster_size=4096',
      convert: { raw, compress: true },
    };
    const file = await buildImage(dir, spec);
    const image = await readFile(file);
    expect(image.length).toBeLessThan(raw.length * 0.7);
    const reference = await referenceRaw(file, dir);
    const { target, reader } = await readIntoMemory(image, { seed: 3 });
    expect(target.bytes.equals(reference)).toBe(true);
    // Before the spool let go of a host cluster once the range running out of it was decoded, it kept
    // nearly the whole image here (the full loop's cloud image overflowed 64 MiB this way).
    expect(reader.spoolPeak).toBeLessThan(512 * KiB);
  });
});

describe('a downloaded chunk freed before the reader got it', () => {
  it('fails the read instead of placing nothing (a freed chunk reads as empty)', async () => {
    const image = await readFile(await buildImage(dir, { name: 'freed', virtualSize: 4 * MiB, writes: [] }));
    const layout = parseQcow2Header(image.subarray(0, 64 * KiB), { deviceSize: 8 * MiB, declaredLength: image.length });
    const reader = new Qcow2Reader(layout, new MemoryTarget(layout.virtualSize), { spoolBudget: MiB });
    const chunk = Buffer.from(new Uint8Array(image).buffer);
    markDownloaded(chunk);
    freeDownloaded(chunk);
    await expect(reader.push(chunk)).rejects.toThrow('a downloaded chunk was freed before the qcow2 reader used it');
  });
});
