// qcow2 images for the streaming reader's tests, built with the real qemu-img and qemu-io, and the reader
// driven over an image file into memory (the bytes it writes, and where).
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { INSPECT_HEAD_BYTES } from '../../agent/image/inspect.ts';
import { parseQcow2Header } from '../../agent/image/qcow2/header.ts';
import { Qcow2Reader, type WriteTarget } from '../../agent/image/qcow2/reader.ts';
import { seededRandom } from '../../agent/seeded-random.ts';
import { markDownloaded } from '../../agent/image/downloaded-chunks.ts';

export const KiB = 1024;
export const MiB = 1024 * KiB;

/** A deterministic pseudo-random generator (the agent's mulberry32). */
export const rng = seededRandom;

/** `length` bytes, half of them compressible text and half noise, from a seed. */
export function content(length: number, seed: number): Buffer {
  const r = rng(seed);
  const out = Buffer.alloc(length);
  for (let i = 0; i < length; i += 4) out.writeUInt32LE((r() * 2 ** 32) >>> 0, i);
  for (let i = 0; i < length; i += 8192) out.write(`block ${i} `.repeat(200), i, Math.min(4096, length - i));
  return out;
}

export interface Spec {
  name: string;
  virtualSize: number;
  /** `-o` options of qemu-img create/convert. */
  options?: string;
  /** Guest ranges written, in this order, with qemu-io (`compressed`: `write -c`, whole clusters). */
  writes?: { offset: number; length: number; compressed?: boolean; zero?: boolean }[];
  /** Convert a raw file of this content (sparse where zero) instead of writing with qemu-io; `-c` compresses. */
  convert?: { raw: Buffer; compress?: boolean };
  /** Grow the image afterwards (the L1 table moves to the end of the file). */
  resizeTo?: number;
}

export async function buildImage(dir: string, spec: Spec): Promise<string> {
  const file = join(dir, `${spec.name}.qcow2`);
  const opts = spec.options ? ['-o', spec.options] : [];
  if (spec.convert) {
    const raw = join(dir, `${spec.name}.src.raw`);
    await writeFile(raw, spec.convert.raw);
    await execa('qemu-img', [
      'convert',
      '-f',
      'raw',
      '-O',
      'qcow2',
      ...(spec.convert.compress ? ['-c'] : []),
      ...opts,
      raw,
      file,
    ]);
  } else {
    await execa('qemu-img', ['create', '-q', '-f', 'qcow2', ...opts, file, String(spec.virtualSize)]);
  }
  let seed = 1;
  const cmds: string[] = [];
  for (const w of spec.writes ?? []) {
    if (w.zero) {
      cmds.push('-c', `write -z ${w.offset} ${w.length}`);
      continue;
    }
    const data = join(dir, `${spec.name}.w${seed}`);
    await writeFile(data, content(w.length, seed++));
    // qemu-io cannot write a file's bytes, so each write is a pattern byte; offsets and lengths still vary.
    cmds.push('-c', `write ${w.compressed ? '-c ' : ''}-P ${(seed * 37) & 0xff} ${w.offset} ${w.length}`);
  }
  if (cmds.length > 0) await execa('qemu-io', ['-f', 'qcow2', ...cmds, file]);
  if (spec.resizeTo) await execa('qemu-img', ['resize', '-q', '-f', 'qcow2', file, String(spec.resizeTo)]);
  return file;
}

export async function referenceRaw(file: string, dir: string): Promise<Buffer> {
  const out = join(dir, 'reference.raw');
  await execa('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', file, out]);
  return readFile(out);
}

/** A target in memory that fails on any write outside [0, size) and counts every byte written. */
export class MemoryTarget implements WriteTarget {
  readonly bytes: Buffer;
  written = 0;
  constructor(
    readonly size: number,
    fill = 0xa5,
  ) {
    this.bytes = Buffer.alloc(size, fill);
  }
  async write(offset: number, data: Buffer): Promise<void> {
    this.check(offset, data.length);
    data.copy(this.bytes, offset);
    this.written += data.length;
  }
  async zero(offset: number, length: number): Promise<void> {
    this.check(offset, length);
    this.bytes.fill(0, offset, offset + length);
    this.written += length;
  }
  private check(offset: number, length: number): void {
    if (!(offset >= 0 && length >= 0 && offset + length <= this.size))
      throw new Error(`OUT OF BOUNDS write ${offset}+${length} (size ${this.size})`);
  }
}

/**
 * Streams `image` through the reader in chunks of varying size; returns the target. With `downloaded`, each
 * chunk is a fresh buffer marked as the HTTP source marks socket reads, so the reader frees the ones it is done
 * with (downloaded-chunks.ts): `freed` counts them, and a chunk freed too early reads as empty and spoils the bytes.
 */
export async function readIntoMemory(
  image: Buffer,
  opts: { deviceSize?: number; spoolBudget?: number; seed?: number; declared?: boolean; downloaded?: boolean } = {},
): Promise<{ target: MemoryTarget; reader: Qcow2Reader; freed: number }> {
  const head = image.subarray(0, INSPECT_HEAD_BYTES);
  const layout = parseQcow2Header(head, {
    deviceSize: opts.deviceSize ?? 64 * MiB,
    declaredLength: opts.declared === false ? undefined : image.length,
  });
  const target = new MemoryTarget(layout.virtualSize);
  const reader = new Qcow2Reader(layout, target, {
    spoolBudget: opts.spoolBudget ?? 64 * MiB,
    declaredLength: opts.declared === false ? undefined : image.length,
  });
  const r = rng(opts.seed ?? 7);
  const chunks: Buffer[] = [];
  for (let at = 0; at < image.length; ) {
    const n = Math.max(1, Math.floor(r() * 200 * KiB));
    let chunk = image.subarray(at, at + n);
    if (opts.downloaded) {
      chunk = Buffer.from(new Uint8Array(chunk).buffer);
      markDownloaded(chunk);
      chunks.push(chunk);
    }
    await reader.push(chunk);
    at += n;
  }
  await reader.end();
  return { target, reader, freed: chunks.filter((c) => (c.buffer as ArrayBuffer).detached).length };
}
