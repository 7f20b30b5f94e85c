// The writer at the end of the deploy data path, on real loop devices: direct I/O with several writes in
// flight, a tail shorter than a sector, the device's bytes past the image left alone, the size limit, a
// device too small for what it was promised, and the plain-file mode the buffer uses.
import { randomBytes } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { describe, expect, it } from 'vitest';
import { BlockWriter } from '../../../agent/image/sinks/block-writer.ts';
import { ImageWriteError } from '../../../agent/errors.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';
import { readDevice } from '../../helpers/image-agent.ts';
import { MiB, withLoops } from '../../helpers/loop.ts';
import { workDir } from '../../helpers/make-image.ts';

/** The data in chunks of uneven sizes, as a network delivers it. */
function chunked(data: Buffer): Readable {
  const parts: Buffer[] = [];
  for (let at = 0, i = 0; at < data.length; i++) {
    const size = [65536, 1000, 300_000, 7, 2 * MiB + 3][i % 5]!;
    parts.push(data.subarray(at, at + size));
    at += size;
  }
  return Readable.from(parts);
}

async function fill(path: string, size: number, byte: number): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.write(Buffer.alloc(size, byte), 0, size, 0);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Writes `bytes` random bytes to `device` through a writer limited to `limit`; returns what the write threw. */
async function writeFailing(device: string, limit: number, bytes: number): Promise<unknown> {
  const writer = await BlockWriter.open(device, limit, new DeviceGuard([device]));
  const err = await pipeline(chunked(randomBytes(bytes)), writer).then(
    () => undefined,
    (e: unknown) => e,
  );
  await writer.release();
  return err;
}

describe('BlockWriter', () => {
  it('writes a device with direct I/O, the short tail included, and nothing past the image', async () => {
    await withLoops([16 * MiB], async ([dev]) => {
      await fill(dev!.path, 16 * MiB, 0xaa);
      const data = randomBytes(9 * MiB + 1234);
      const writer = await BlockWriter.open(dev!.path, dev!.sizeBytes, new DeviceGuard([dev!.path]));
      expect(writer.direct).toBe(true);
      await pipeline(chunked(data), writer);
      await writer.release();
      expect(writer.written).toBe(data.length);
      expect((await readDevice(dev!.path, 0, data.length)).equals(data)).toBe(true);
      expect((await readDevice(dev!.path, data.length, data.length + 4096)).equals(Buffer.alloc(4096, 0xaa))).toBe(
        true,
      );
    });
  });

  it('refuses more bytes than its limit before writing them', async () => {
    await withLoops([8 * MiB], async ([dev]) => {
      const err = await writeFailing(dev!.path, 3 * MiB, 4 * MiB);
      expect(err).toMatchObject({ name: 'ImageWriteError', tooLarge: true });
      expect((err as Error).message).toContain(`larger than the ${3 * MiB} bytes ${dev!.path} can hold`);
    });
  });

  it('fails with ImageWriteError when the device ends before the image does', async () => {
    await withLoops([4 * MiB], async ([dev]) => {
      const err = await writeFailing(dev!.path, 64 * MiB, 12 * MiB);
      expect(err).toBeInstanceOf(ImageWriteError);
      expect((err as Error).message).toMatch(new RegExp(`writing ${dev!.path} at byte \\d+ failed`));
    });
  });

  it('will not open a device the guard refuses', async () => {
    await withLoops([4 * MiB, 4 * MiB], async ([allowed, other]) => {
      await expect(BlockWriter.open(other!.path, other!.sizeBytes, new DeviceGuard([allowed!.path]))).rejects.toThrow(
        `refusing to write an image to ${other!.path}: it is not on the device allow-list`,
      );
    });
  });

  it('writes a plain file through the page cache when given no guard (the image buffer)', async () => {
    const work = await workDir();
    try {
      const file = join(work.dir, 'buffer');
      const data = randomBytes(5 * MiB + 17);
      const writer = await BlockWriter.open(file, 64 * MiB, null);
      expect(writer.direct).toBe(false);
      await pipeline(chunked(data), writer);
      await writer.release();
      expect((await readFile(file)).equals(data)).toBe(true);
    } finally {
      await work.cleanup();
    }
  });
});
