// Overwrites a whole block device in-process: `passes` of pseudo-random data (an AES-256-CTR keystream
// under a fresh random key, fast enough to keep up with any disk), then optionally zeros. Each pass is
// flushed to the device before the next starts. No external tool, so the ramdisk needs no shred.
import { createCipheriv, randomBytes } from 'node:crypto';
import { open } from 'node:fs/promises';
import { writeAll } from '../host/write-all.ts';

const CHUNK = 4 * 1024 * 1024;

export interface OverwriteProgress {
  pass: number;
  passes: number;
  bytes: number;
  total: number;
}

async function onePass(
  disk: string,
  sizeBytes: number,
  next: () => Buffer,
  report: (bytes: number) => void,
  signal: AbortSignal | undefined,
): Promise<void> {
  const fh = await open(disk, 'r+');
  try {
    for (let at = 0; at < sizeBytes; at += CHUNK) {
      // A pass takes hours on a large disk; a cancelled erase stops within a chunk.
      signal?.throwIfAborted();
      const length = Math.min(CHUNK, sizeBytes - at);
      await writeAll(fh, next(), 0, length, at);
      report(at + length);
    }
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Writes every byte of `disk` `randomPasses` times with random data, then once with zeros if asked. Throws
 * the signal's reason once it is aborted, leaving the disk part-written.
 */
export async function overwriteDevice(
  disk: string,
  sizeBytes: number,
  randomPasses: number,
  zeroPass: boolean,
  onProgress: (p: OverwriteProgress) => void = () => {},
  signal?: AbortSignal,
): Promise<void> {
  const passes = randomPasses + (zeroPass ? 1 : 0);
  const zeros = Buffer.alloc(CHUNK);
  for (let pass = 1; pass <= passes; pass++) {
    const random = pass <= randomPasses;
    const cipher = random ? createCipheriv('aes-256-ctr', randomBytes(32), randomBytes(16)) : null;
    const next = () => (cipher ? cipher.update(zeros) : zeros);
    await onePass(disk, sizeBytes, next, (bytes) => onProgress({ pass, passes, bytes, total: sizeBytes }), signal);
  }
}
