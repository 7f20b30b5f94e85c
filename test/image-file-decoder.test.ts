// Compressed images on the buffered path: the tool decodes straight into the buffer file, stopped by the
// kernel at the size the buffer may take; broken data, a missing tool and a failed download each end it
// with their own error, and no decoder outlives the call.
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeToFile } from '../agent/image/file-decoder.ts';
import type { Compressed } from '../agent/image/decompress.ts';
import { TooLargeError } from '../agent/image/block-writer.ts';
import { ImageDownloadError, InvalidImage, ToolError } from '../agent/errors.ts';

const MiB = 1024 * 1024;
const PACK_ARGS = { gzip: ['-c', '-1'], zstd: ['-q', '-c', '-1'], xz: ['-c', '-0'] };

async function pack(kind: Compressed, data: Buffer): Promise<Buffer> {
  const { stdout } = await execa(kind, PACK_ARGS[kind], { input: data, encoding: 'buffer' });
  return Buffer.from(stdout);
}

async function* pieces(data: Buffer, size = 65536): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length; at += size) yield data.subarray(at, at + size);
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-file-decoder-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.each(['gzip', 'zstd', 'xz'] as const)('%s into the buffer file', (kind) => {
  it('writes the decoded image and returns its size', async () => {
    const image = Buffer.concat([randomBytes(2 * MiB), Buffer.alloc(3 * MiB), randomBytes(777)]);
    const file = join(dir, `ok.${kind}`);
    expect(await decodeToFile(kind, pieces(await pack(kind, image)), file, 64 * MiB)).toBe(image.length);
    expect((await readFile(file)).equals(image)).toBe(true);
  });

  it('stops at the limit: an image that decodes to more is too large, and the file holds no more than the limit', async () => {
    const file = join(dir, `big.${kind}`);
    const failure = decodeToFile(kind, pieces(await pack(kind, Buffer.alloc(16 * MiB))), file, 3 * MiB);
    await expect(failure).rejects.toBeInstanceOf(TooLargeError);
    expect((await stat(file)).size).toBeLessThanOrEqual(3 * MiB);
  });

  it('fails broken data as an invalid image', async () => {
    const packed = await pack(kind, randomBytes(MiB));
    for (let i = 64; i < packed.length; i += 97) packed[i] = packed[i]! ^ 0x5a;
    const failure = decodeToFile(kind, pieces(packed), join(dir, `broken.${kind}`), 64 * MiB);
    await expect(failure).rejects.toBeInstanceOf(InvalidImage);
    await expect(failure).rejects.toThrow(new RegExp(`${kind} data could not be decompressed`));
  });
});

it('a download error stands, and the decoder is gone when the call returns (the file stops growing)', async () => {
  const file = join(dir, 'cut.gz');
  const packed = await pack('gzip', randomBytes(4 * MiB));
  async function* cut(): AsyncGenerator<Buffer> {
    yield packed.subarray(0, packed.length / 2);
    throw new ImageDownloadError('the connection broke');
  }
  const failure = decodeToFile('gzip', cut(), file, 64 * MiB);
  await expect(failure).rejects.toBeInstanceOf(ImageDownloadError);
  await expect(failure).rejects.toThrow(/the connection broke/);
  const size = (await stat(file)).size;
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await stat(file)).size).toBe(size);
});

it('a decoder that is not installed is a ToolError, not a verdict on the image', async () => {
  // prlimit is found, the decoder is not.
  const bin = join(dir, 'bin');
  await mkdir(bin);
  const { stdout: prlimit } = await execa('sh', ['-c', 'command -v prlimit']);
  await symlink(prlimit, join(bin, 'prlimit'));
  await chmod(bin, 0o755);
  const packed = await pack('gzip', randomBytes(100_000));
  const path = process.env.PATH;
  process.env.PATH = bin;
  try {
    const failure = decodeToFile('gzip', pieces(packed), join(dir, 'no-tool.gz'), 64 * MiB);
    await expect(failure).rejects.toBeInstanceOf(ToolError);
    await expect(failure).rejects.toThrow(/pigz could not be started/);
  } finally {
    process.env.PATH = path;
  }
});
