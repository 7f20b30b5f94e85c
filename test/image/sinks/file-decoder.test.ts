// Compressed images on the buffered path: the tool decodes straight into the buffer file, stopped by the
// kernel at the size the buffer may take; data after the end of a gzip stream is still read (for the
// checksum); broken data, a killed or missing tool and a failed download each end it with their own
// error; and no decoder outlives the call.
import { randomBytes } from 'node:crypto';
import { chmod, mkdir, mkdtemp, readFile, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { decodeToFile } from '../../../agent/image/sinks/file-decoder.ts';
import { ImageDownloadError, ImageWriteError, InvalidImage, ToolError } from '../../../agent/errors.ts';
import { pack } from '../../helpers/make-image.ts';
import { withPath } from '../../helpers/fake-tools.ts';

const MiB = 1024 * 1024;

/** The bytes in 64 KiB pieces, counting how many the consumer pulled. */
async function* pieces(data: Buffer, pulled = { bytes: 0 }): AsyncGenerator<Buffer> {
  for (let at = 0; at < data.length; at += 65536) {
    const piece = data.subarray(at, at + 65536);
    pulled.bytes += piece.length;
    yield piece;
  }
}

/** A PATH holding prlimit and, if given, a stand-in for pigz. */
async function pathWith(name: string, pigz?: string): Promise<string> {
  const bin = join(dir, name);
  await mkdir(bin);
  const { stdout: prlimit } = await execa('sh', ['-c', 'command -v prlimit']);
  await symlink(prlimit, join(bin, 'prlimit'));
  if (pigz) {
    await writeFile(join(bin, 'pigz'), pigz);
    await chmod(join(bin, 'pigz'), 0o755);
  }
  return bin;
}

let dir: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-file-decoder-'));
});
afterAll(async () => {
  await rm(dir, { recursive: true, force: true });
});

describe.each(['gzip', 'zstd', 'xz'] as const)('%s into the buffer file', (kind) => {
  it('writes the decoded image, up to exactly the limit', async () => {
    const image = Buffer.concat([randomBytes(2 * MiB), Buffer.alloc(3 * MiB), randomBytes(777)]);
    const file = join(dir, `ok.${kind}`);
    await decodeToFile(kind, pieces(await pack(kind, image)), file, image.length);
    expect((await readFile(file)).equals(image)).toBe(true);
  });

  it('stops at the limit: an image that decodes to more is too large, and the file holds no more than the limit', async () => {
    const file = join(dir, `big.${kind}`);
    const failure = decodeToFile(kind, pieces(await pack(kind, Buffer.alloc(16 * MiB))), file, 3 * MiB);
    await expect(failure).rejects.toMatchObject({ name: 'ImageWriteError', tooLarge: true });
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

it('gzip followed by 4 MiB of zeros: pigz stops at the end of the gzip data, yet every byte is read', async () => {
  const image = randomBytes(MiB);
  const padded = Buffer.concat([await pack('gzip', image), Buffer.alloc(4 * MiB)]);
  const pulled = { bytes: 0 };
  const file = join(dir, 'padded.gz');
  await decodeToFile('gzip', pieces(padded, pulled), file, 64 * MiB);
  expect((await readFile(file)).equals(image)).toBe(true);
  expect(pulled.bytes).toBe(padded.length);
});

it('a download error stands, and the decoder is stopped when the call returns', async () => {
  // A decoder that keeps writing whatever its input does: only being killed stops it.
  const bin = await pathWith('bin-endless', '#!/bin/sh\nwhile :; do echo more; /bin/sleep 0.01; done\n');
  const file = join(dir, 'cut.out');
  async function* cut(): AsyncGenerator<Buffer> {
    yield Buffer.alloc(1000);
    await new Promise((resolve) => setTimeout(resolve, 200));
    throw new ImageDownloadError('the connection broke');
  }
  const failure = withPath(bin, () => decodeToFile('gzip', cut(), file, 64 * MiB));
  await expect(failure).rejects.toBeInstanceOf(ImageDownloadError);
  const size = (await stat(file)).size;
  expect(size).toBeGreaterThan(0);
  await new Promise((resolve) => setTimeout(resolve, 300));
  expect((await stat(file)).size).toBe(size);
});

it('a decoder killed by a signal (the OOM killer, say) is a write failure, not a verdict on the image', async () => {
  const bin = await pathWith('bin-killed', '#!/bin/sh\nkill -KILL $$\n');
  const packed = await pack('gzip', randomBytes(100_000));
  const failure = withPath(bin, () => decodeToFile('gzip', pieces(packed), join(dir, 'killed.gz'), 64 * MiB));
  await expect(failure).rejects.toBeInstanceOf(ImageWriteError);
  await expect(failure).rejects.toThrow(/gzip decoder was killed by SIGKILL/);
});

it('a decoder that is not installed is a ToolError, not a verdict on the image', async () => {
  const bin = await pathWith('bin-no-pigz');
  const packed = await pack('gzip', randomBytes(100_000));
  const failure = withPath(bin, () => decodeToFile('gzip', pieces(packed), join(dir, 'no-tool.gz'), 64 * MiB));
  await expect(failure).rejects.toBeInstanceOf(ToolError);
  await expect(failure).rejects.toThrow(/pigz could not be started/);
});

it('without prlimit, too: a ToolError', async () => {
  const packed = await pack('gzip', randomBytes(100_000));
  const failure = withPath('/nonexistent', () =>
    decodeToFile('gzip', pieces(packed), join(dir, 'no-prlimit.gz'), 64 * MiB),
  );
  await expect(failure).rejects.toBeInstanceOf(ToolError);
  await expect(failure).rejects.toThrow(/prlimit could not be started/);
});
