// Compressed images on the stream path (gzip through pigz, zstd, xz): the gate that decodes just the head of
// an image before anything is written (small images, decompression bombs, streams that hide their data
// behind skippable frames), and `<tool> -dc | dd` onto a real loop device (the bytes, the count, a device
// too small, broken data, data after a gzip stream).
import { randomBytes } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { decodedHeadGate } from '../../../agent/image/gates.ts';
import { DecoderPipe } from '../../../agent/image/sinks/decoder-pipe.ts';
import { DeviceTarget } from '../../../agent/image/sinks/device-target.ts';
import { nullLogger } from '../../../agent/log.ts';
import { InvalidImage, ToolError } from '../../../agent/errors.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';
import { readDevice } from '../../helpers/image-agent.ts';
import { pack } from '../../helpers/make-image.ts';
import { MiB, withLoops } from '../../helpers/loop.ts';
import { withPath } from '../../helpers/fake-tools.ts';

const HEAD = 64 * 1024;

/** The bytes in pieces (16 KiB by default), counting how many the consumer pulled. */
function pieces(data: Buffer, pulled = { bytes: 0 }, size = 16384): AsyncIterable<Buffer> {
  return (async function* () {
    for (let at = 0; at < data.length; at += size) {
      const piece = data.subarray(at, at + size);
      pulled.bytes += piece.length;
      yield piece;
    }
  })();
}

async function drain(source: AsyncIterable<Buffer>): Promise<Buffer> {
  const parts: Buffer[] = [];
  for await (const chunk of source) parts.push(chunk);
  return Buffer.concat(parts);
}

describe.each(['gzip', 'zstd', 'xz'] as const)('%s: the decoded-head gate', (kind) => {
  it('hands the whole image to the check when it is smaller than the head, and passes every byte on', async () => {
    const image = randomBytes(20_000);
    const packed = await pack(kind, image);
    let seen: Buffer | undefined;
    const out = await drain(
      decodedHeadGate(kind, HEAD, async (head) => {
        seen = head;
      })(pieces(packed)),
    );
    expect(seen!.equals(image)).toBe(true);
    expect(out.equals(packed)).toBe(true);
  });

  it('stops decoding at the head of a decompression bomb (64 GiB of zeros), having held back little', async () => {
    // Concatenated frames (members for gzip, streams for xz) are one valid image: 1024 × 64 MiB of zeros.
    const packed = Buffer.concat(Array(1024).fill(await pack(kind, Buffer.alloc(64 * MiB))));
    const pulled = { bytes: 0 };
    let seen: Buffer | undefined;
    let pulledAtCheck = 0;
    const out = await drain(
      decodedHeadGate(kind, HEAD, async (head) => {
        seen = head;
        pulledAtCheck = pulled.bytes;
      })(pieces(packed, pulled, 4096)),
    );
    expect(seen!.equals(Buffer.alloc(HEAD))).toBe(true);
    expect(pulledAtCheck).toBeLessThan(packed.length / 2);
    expect(out.equals(packed)).toBe(true);
  });

  it('refuses when the check refuses, before passing anything on', async () => {
    const packed = await pack(kind, randomBytes(200_000));
    const passed: Buffer[] = [];
    const gate = decodedHeadGate(kind, HEAD, async () => {
      throw new InvalidImage('refused by the check');
    })(pieces(packed));
    await expect(
      (async () => {
        for await (const chunk of gate) passed.push(chunk);
      })(),
    ).rejects.toThrow(/refused by the check/);
    expect(passed).toEqual([]);
  });

  it('fails data broken at its start as an invalid image', async () => {
    const packed = await pack(kind, randomBytes(200_000));
    // The magic stays; the headers after it do not.
    for (let i = 6; i < 16; i++) packed[i] = packed[i]! ^ 0xa5;
    await expect(drain(decodedHeadGate(kind, HEAD, async () => undefined)(pieces(packed)))).rejects.toThrow(
      new RegExp(`${kind} data could not be decompressed`),
    );
  });
});

it('zstd: refuses a stream whose first 8 MiB decode to nothing (a skippable frame hiding the image)', async () => {
  const hidden = Buffer.alloc(8 + 9 * MiB);
  hidden.writeUInt32LE(0x184d2a50, 0);
  hidden.writeUInt32LE(9 * MiB, 4);
  const packed = Buffer.concat([hidden, await pack('zstd', randomBytes(100_000))]);
  await expect(drain(decodedHeadGate('zstd', HEAD, async () => undefined)(pieces(packed)))).rejects.toThrow(
    /first 8388608 bytes of the zstd image decode to less than 65536 bytes/,
  );
});

it('a decoder that cannot be started is a ToolError, not a verdict on the image', async () => {
  const packed = await pack('zstd', randomBytes(100_000));
  await withPath('/nonexistent', async () => {
    const failure = drain(decodedHeadGate('zstd', HEAD, async () => undefined)(pieces(packed)));
    await expect(failure).rejects.toBeInstanceOf(ToolError);
    await expect(failure).rejects.toThrow(/zstd could not be started/);
  });
});

/** The loop device as a sink target, with the guard allowing only it. */
function target(loop: { path: string; sizeBytes: number }): DeviceTarget {
  return new DeviceTarget(
    { path: loop.path, size: loop.sizeBytes, logicalSectorSize: 512 },
    new DeviceGuard([loop.path]),
    nullLogger,
  );
}

describe('<tool> -dc | dd onto a loop device', () => {
  it.each(['gzip', 'zstd', 'xz'] as const)('%s: writes the decoded image and reports its size', async (kind) => {
    await withLoops([8 * MiB], async ([loop]) => {
      const image = Buffer.concat([randomBytes(3 * MiB), Buffer.alloc(MiB), randomBytes(1234)]);
      const decoder = await DecoderPipe.start(kind, target(loop!));
      try {
        await decoder.write(pieces(await pack(kind, image)));
        expect((await decoder.finish()).bytes).toBe(image.length);
        // The first MiB is held back until commit: before it, the device's head is still blank.
        expect((await readDevice(loop!.path, 0, MiB)).equals(Buffer.alloc(MiB))).toBe(true);
        await decoder.commit();
      } finally {
        await decoder.release();
      }
      expect((await readDevice(loop!.path, 0, image.length)).equals(image)).toBe(true);
    });
  });

  it('gzip followed by 4 MiB of zeros: pigz stops at the end of the gzip data, yet every byte is read', async () => {
    await withLoops([8 * MiB], async ([loop]) => {
      const image = randomBytes(3 * MiB);
      const padded = Buffer.concat([await pack('gzip', image), Buffer.alloc(4 * MiB)]);
      const pulled = { bytes: 0 };
      const decoder = await DecoderPipe.start('gzip', target(loop!));
      try {
        await decoder.write(pieces(padded, pulled));
        expect((await decoder.finish()).bytes).toBe(image.length);
        await decoder.commit();
      } finally {
        await decoder.release();
      }
      expect(pulled.bytes).toBe(padded.length);
      expect((await readDevice(loop!.path, 0, image.length)).equals(image)).toBe(true);
    });
  });

  it('fails an image that decodes to more than the device holds as too large', async () => {
    await withLoops([4 * MiB], async ([loop]) => {
      const decoder = await DecoderPipe.start('zstd', target(loop!));
      try {
        const failure = decoder.write(pieces(await pack('zstd', randomBytes(6 * MiB)))).then(() => decoder.finish());
        await expect(failure).rejects.toMatchObject({ name: 'ImageWriteError', tooLarge: true });
        await expect(failure).rejects.toThrow(/larger than/);
      } finally {
        await decoder.release();
      }
    });
  });

  it('is refused by the guard for a device outside the allow-list', async () => {
    await withLoops([4 * MiB], async ([loop]) => {
      await expect(
        DecoderPipe.start(
          'zstd',
          new DeviceTarget(
            { path: loop!.path, size: loop!.sizeBytes, logicalSectorSize: 512 },
            new DeviceGuard(['/dev/loop-not-this-one']),
            nullLogger,
          ),
        ),
      ).rejects.toThrow(/allow/);
    });
  });
});
