// The checksum thread: the same digests as hashing in place, across uneven chunks and slot boundaries,
// the digest of a file read by the thread, and a failing thread surfaces as an error instead of a hang.
import { createHash, randomBytes } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { CommandExecutionError } from '../agent/errors.ts';
import { HashWorker } from '../agent/image/hash-worker.ts';

describe('HashWorker', () => {
  it.each(['md5', 'sha256', 'sha512'])('%s of chunks that straddle its slots equals createHash', async (algo) => {
    const data = randomBytes(9 * 1024 * 1024 + 77);
    const hash = new HashWorker(algo);
    try {
      for (let at = 0, i = 0; at < data.length; i++) {
        const size = [3, 65536, 1024 * 1024 + 1, 999_999][i % 4]!;
        await hash.update(data.subarray(at, at + size));
        at += size;
      }
      expect(await hash.digest()).toBe(createHash(algo).update(data).digest('hex'));
    } finally {
      await hash.close();
    }
  });

  it('of nothing is the empty digest', async () => {
    const hash = new HashWorker('sha256');
    expect(await hash.digest()).toBe(createHash('sha256').digest('hex'));
    await hash.close();
  });

  it('of a file, read by the thread itself, equals createHash; a missing file is CommandExecutionError', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hash-'));
    try {
      const data = randomBytes(3 * 1024 * 1024 + 5);
      await writeFile(join(dir, 'image'), data);
      const hash = new HashWorker('sha512');
      try {
        expect(await hash.digestOfFile(join(dir, 'image'))).toBe(createHash('sha512').update(data).digest('hex'));
      } finally {
        await hash.close();
      }
      await writeFile(join(dir, 'empty'), '');
      const empty = new HashWorker('md5');
      expect(await empty.digestOfFile(join(dir, 'empty'))).toBe(createHash('md5').digest('hex'));
      await empty.close();
      const missing = new HashWorker('sha256');
      const err = await missing.digestOfFile(join(dir, 'absent')).catch((e: unknown) => e);
      await missing.close();
      expect(err).toBeInstanceOf(CommandExecutionError);
      expect((err as Error).message).toMatch(/hashing the image failed: ENOENT/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('fails a file digest still being read when the thread is stopped, rather than leave it waiting', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hash-'));
    try {
      await writeFile(join(dir, 'image'), Buffer.alloc(256 * 1024 * 1024));
      const hash = new HashWorker('sha512');
      const pending = hash.digestOfFile(join(dir, 'image')).catch((e: unknown) => e);
      await hash.close();
      expect(await pending).toBeInstanceOf(CommandExecutionError);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('reports a thread that cannot hash as CommandExecutionError, which no retry would fix', async () => {
    const hash = new HashWorker('no-such-digest');
    const err = await (async () => {
      for (let i = 0; i < 16; i++) await hash.update(Buffer.alloc(1024 * 1024));
      return hash.digest();
    })().catch((e: unknown) => e);
    await hash.close();
    expect(err).toBeInstanceOf(CommandExecutionError);
    expect((err as Error).message).toMatch(/hashing the image failed: .*(Digest method not supported|no-such-digest)/i);
  });
});
