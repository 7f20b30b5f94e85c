// The in-process qcow2 reader the prechecks use: what it reads of the guest disk is what qemu-img converts,
// for plain and compressed (deflate, zstd) clusters, extended L2 entries, unallocated ranges and reads that
// span clusters. Given only a stream's first bytes, it reads what they hold and nothing it would have to guess.
import { randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { openQcow2Guest, qcow2PrefixView } from '../../../agent/image/qcow2/guest.ts';
import { workDir } from '../../helpers/make-image.ts';

const MiB = 1024 * 1024;
let work: Awaited<ReturnType<typeof workDir>>;
let raw: Buffer;

beforeAll(async () => {
  work = await workDir();
  // Random data with holes and a repeated run, so that clusters are allocated, absent and compressible.
  raw = Buffer.alloc(6 * MiB);
  randomBytes(MiB).copy(raw, 0);
  Buffer.alloc(MiB, 0x5a).copy(raw, 3 * MiB);
  randomBytes(300 * 1024).copy(raw, 5 * MiB + 12345);
  await writeFile(join(work.dir, 'g.raw'), raw);
});
afterAll(async () => {
  await work?.cleanup();
});

it.each([
  ['plain, 64 KiB clusters', []],
  ['compressed', ['-c']],
  ['compressed, 4 KiB clusters', ['-c', '-o', 'cluster_size=4096']],
  ['version 2 (compat 0.10)', ['-o', 'compat=0.10']],
  ['zstd-compressed', ['-c', '-o', 'compression_type=zstd']],
  ['extended L2 entries', ['-o', 'extended_l2=on,cluster_size=65536']],
])('reads the guest disk of a %s qcow2 as qemu-img does', async (_name, opts) => {
  const file = join(work.dir, `g-${Math.random()}.qcow2`);
  await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', ...opts, join(work.dir, 'g.raw'), file]);
  expect((await readFile(file)).length).toBeLessThan(raw.length);
  const guest = await openQcow2Guest(file, (await readFile(file)).length);
  try {
    for (const [offset, length] of [
      [0, 65536],
      [MiB - 100, 200],
      [2 * MiB, 4096],
      [3 * MiB + 7, 70000],
      [5 * MiB, MiB],
      [0, 6 * MiB],
    ] as const) {
      const got = await guest.read(offset, length);
      expect(got?.equals(raw.subarray(offset, offset + length)), `${offset}+${length}`).toBe(true);
    }
  } finally {
    await guest.close();
  }
});

it.each([
  ['plain', []],
  ['compressed', ['-c']],
])(
  'reads a %s qcow2 from its first bytes only: null where a table or cluster lies beyond them',
  async (_name, opts) => {
    const file = join(work.dir, `p-${Math.random()}.qcow2`);
    await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', ...opts, join(work.dir, 'g.raw'), file]);
    const whole = await readFile(file);
    // Enough for the tables and the guest's first MiB, not for its last.
    const prefix = whole.subarray(0, Math.min(whole.length - 1, 2 * MiB));
    const view = await qcow2PrefixView(prefix, false, whole.length);
    expect(view.partial).toBe(true);
    expect(view.head.equals(raw.subarray(0, 65536))).toBe(true);
    expect((await view.read!(MiB - 100, 200))?.equals(raw.subarray(MiB - 100, MiB + 100))).toBe(true);
    expect(await view.read!(5 * MiB, MiB)).toBeNull();
    // The whole file given as the prefix reads everything.
    const all = await qcow2PrefixView(whole, true, whole.length);
    expect((await all.read!(0, 6 * MiB))?.equals(raw)).toBe(true);
  },
);
