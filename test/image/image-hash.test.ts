// The image checksum on the thread pool (the hashing addon): the same digests as hashing in place, across
// uneven chunks and slot boundaries, the digest of a file read off the main thread, and failures as errors;
// and an agent without its addon refuses to start.
import { createHash, randomBytes } from 'node:crypto';
import { cp, mkdtemp, readdir, readlink, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { CommandExecutionError } from '../../agent/errors.ts';
import { ImageHash } from '../../agent/image/image-hash.ts';
import { until } from '../helpers/until.ts';

describe('ImageHash', () => {
  it.each(['md5', 'sha256', 'sha512'])('%s of chunks that straddle its slots equals createHash', async (algo) => {
    const data = randomBytes(9 * 1024 * 1024 + 77);
    const hash = new ImageHash(algo);
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
    const hash = new ImageHash('sha256');
    expect(await hash.digest()).toBe(createHash('sha256').digest('hex'));
    await hash.close();
  });

  it('of a file, read on the thread pool, equals createHash; a missing file is CommandExecutionError', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hash-'));
    try {
      const data = randomBytes(3 * 1024 * 1024 + 5);
      await writeFile(join(dir, 'image'), data);
      const hash = new ImageHash('sha512');
      try {
        expect(await hash.digestOfFile(join(dir, 'image'))).toBe(createHash('sha512').update(data).digest('hex'));
      } finally {
        await hash.close();
      }
      // A file's digest is its own, whatever was hashed before.
      await writeFile(join(dir, 'empty'), '');
      const reused = new ImageHash('md5');
      try {
        await reused.update(Buffer.from('streamed bytes'));
        expect(await reused.digest()).toBe(createHash('md5').update('streamed bytes').digest('hex'));
        expect(await reused.digestOfFile(join(dir, 'empty'))).toBe(createHash('md5').digest('hex'));
      } finally {
        await reused.close();
      }
      const missing = new ImageHash('sha256');
      const err = await missing.digestOfFile(join(dir, 'absent')).catch((e: unknown) => e);
      await missing.close();
      expect(err).toBeInstanceOf(CommandExecutionError);
      expect((err as Error).message).toMatch(/hashing the image failed: No such file or directory/);
      // A path the C side would cut at its NUL byte (another file) is refused instead.
      const cut = new ImageHash('sha256');
      const nul = await cut.digestOfFile(`${join(dir, 'image')}\0.ignored`).catch((e: unknown) => e);
      await cut.close();
      expect(nul).toBeInstanceOf(CommandExecutionError);
      expect((nul as Error).message).toMatch(/a path with a NUL byte/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('stopped while reading a file: the digest fails rather than waits, and the file is not left open', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-hash-'));
    const file = join(dir, 'image');
    // The buffer file is deleted afterwards; an open descriptor would keep its tmpfs memory in use.
    const openOnFile = async () => {
      const fds = await readdir('/proc/self/fd');
      const targets = await Promise.all(fds.map((fd) => readlink(`/proc/self/fd/${fd}`).catch(() => '')));
      return targets.includes(file);
    };
    try {
      await writeFile(file, Buffer.alloc(512 * 1024 * 1024));
      const hash = new ImageHash('sha512');
      const pending = hash.digestOfFile(file).catch((e: unknown) => e);
      await until('the hash to open the file', openOnFile, 20_000, 5);
      await hash.close();
      expect(await pending).toBeInstanceOf(CommandExecutionError);
      expect(await openOnFile()).toBe(false);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('refuses an algorithm OpenSSL does not know as CommandExecutionError, which no retry would fix', () => {
    expect(() => new ImageHash('no-such-digest')).toThrow(CommandExecutionError);
    expect(() => new ImageHash('no-such-digest')).toThrow(/hashing the image failed: .*unknown digest algorithm/);
  });

  it('settles a digest that a close interrupts, and refuses bytes after the digest', async () => {
    const data = randomBytes(3 * 1024 * 1024 + 10);
    const hash = new ImageHash('sha256');
    await hash.update(data);
    const digest = hash.digest().catch((e: unknown) => e);
    await hash.close();
    // Stopped while it waited: the digest settles (as an error), it does not hang.
    expect(await digest).toBeInstanceOf(CommandExecutionError);
    const after = new ImageHash('md5');
    expect(await after.digest()).toBe(createHash('md5').digest('hex'));
    expect(() => after.update(Buffer.alloc(1))).toThrow(/bytes came after its digest/);
    await expect(after.digest()).rejects.toThrow(/already taken/);
    await after.close();
  });

  it('after close, takes no more bytes and gives no digest', async () => {
    const hash = new ImageHash('sha256');
    await hash.update(Buffer.alloc(3 * 1024 * 1024));
    await hash.close();
    expect(() => hash.update(Buffer.alloc(1))).toThrow(/the hash was stopped/);
    await expect(hash.digest()).rejects.toThrow(/the hash was stopped/);
  });

  it('missing, stops the agent at start with one line naming it', async () => {
    // A copy of the agent's sources without the built addon, as a checkout where build-addon.sh never ran.
    const dir = await mkdtemp(join(tmpdir(), 'ina-no-addon-'));
    try {
      await cp('agent', join(dir, 'agent'), { recursive: true, filter: (from) => !from.includes('hash-addon.node') });
      await cp('package.json', join(dir, 'package.json'));
      await symlink(join(process.cwd(), 'node_modules'), join(dir, 'node_modules'));
      const r = await execa(
        process.execPath,
        ['--import', 'tsx', join(dir, 'agent/main.ts'), '--standalone', '--ipa-listen-port=0'],
        { reject: false, timeout: 20_000 },
      );
      expect(r.exitCode).toBe(1);
      expect(r.stderr.trim().split('\n')).toEqual([
        expect.stringMatching(
          new RegExp(
            `^ironic-node-agent: the hashing addon ${dir}/agent/image/hash-addon.node cannot be loaded \\(scripts/build-addon.sh builds it\\): `,
          ),
        ),
      ]);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
