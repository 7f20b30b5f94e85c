// The checks on a complete buffer file: inspection of its header and footer (format, safety, virtual size
// against the device), and its checksum, which for a plain image is computed from the file while the
// device write goes on.
import { open, stat } from 'node:fs/promises';
import { ImageChecksumError, ImageWriteError, InvalidImage } from '../errors.ts';
import type { Config } from '../config/config.ts';
import { verifyDigest, type ExpectedDigest } from './checksum.ts';
import { refuseUnsafe } from './gates.ts';
import type { ImageHash } from './image-hash.ts';
import { INSPECT_HEAD_BYTES, inspectImage } from './inspect.ts';
import { assertQcow2Within } from './qcow2/extent.ts';
import { openQcow2Guest, type Qcow2Guest } from './qcow2/guest.ts';
import { readAt } from './qcow2/read-at.ts';
import type { ImageView, SinkTarget } from './sinks/sink.ts';
import type { ProgressMeter } from '../progress.ts';

export interface InspectedBuffer {
  file: string;
  format: string;
  virtualSize: number;
  /** The file's size. */
  size: number;
  head: Buffer;
}

async function readEnds(file: string, size: number): Promise<{ head: Buffer; tail: Buffer }> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(Math.min(size, INSPECT_HEAD_BYTES));
    await fh.read(head, 0, head.length, 0);
    const tail = Buffer.alloc(Math.min(size, 512));
    await fh.read(tail, 0, tail.length, size - tail.length);
    return { head, tail };
  } finally {
    await fh.close();
  }
}

/**
 * Reads the image's header and footer, and refuses it unless it is an allowed format that fits the device
 * (and, for qcow2, holds every cluster its tables name).
 */
export async function inspectBuffer(
  file: string,
  declared: string | undefined,
  config: Config,
  device: SinkTarget,
): Promise<InspectedBuffer> {
  const size = (await stat(file)).size;
  const { head, tail } = await readEnds(file, size);
  const found = inspectImage(head, tail);
  refuseUnsafe(found, declared, config.image.permittedFormats, !config.image.disableDeepInspection);
  const virtualSize = found.format === 'raw' ? size : found.virtualSize;
  if (virtualSize === undefined)
    throw new InvalidImage(`Security: the ${found.format} header does not state a virtual size`);
  if (virtualSize > device.size) {
    throw new ImageWriteError(
      `the image's virtual size (${virtualSize} bytes) is larger than ${device.path} (${device.size} bytes)`,
      {
        tooLarge: true,
      },
    );
  }
  if (found.format === 'qcow2') await assertQcow2Within(file, size);
  if (device.precheck) await precheck(device.precheck, file, found.format, head, size);
  return { file, format: found.format, virtualSize, size, head };
}

async function readFileAt(file: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(file, 'r');
  try {
    return await readAt(fh, offset, length);
  } finally {
    await fh.close();
  }
}

/** Runs the target's precheck on the image as it will be on the device: the file itself, or what a qcow2 describes. */
async function precheck(
  check: (image: ImageView) => Promise<void>,
  file: string,
  format: string,
  head: Buffer,
  size: number,
): Promise<void> {
  if (format === 'raw') return check({ head, read: (offset, length) => readFileAt(file, offset, length) });
  // Other formats' contents are not read here; the checks after the write still apply to them.
  if (format !== 'qcow2') return;
  // The guest is read for this check only: what its decoders refuse leaves the check unable to tell, and
  // qemu-img judges the image as before.
  let guest: Qcow2Guest;
  let guestHead: Buffer;
  try {
    guest = await openQcow2Guest(file, size);
    guestHead = await guest.read(0, INSPECT_HEAD_BYTES);
  } catch {
    return;
  }
  const read = (offset: number, length: number) => guest.read(offset, length).catch(() => null);
  try {
    await check({ head: guestHead, read });
  } finally {
    await guest.close();
  }
}

/**
 * The checksum of a buffered image. One that came compressed was hashed on the way in and is checked at once.
 * A plain one is hashed from the buffer file while inspection and the device write go on, so that the hash
 * does not compete with the download for CPU (docs/performance.md). Only inspected bytes reach qemu-img
 * either way; a tenant's own hostile image would arrive with a valid checksum, so the inspection, not the
 * checksum, is what guards it.
 */
export function bufferChecksum(
  meter: ProgressMeter,
  hash: ImageHash,
  file: string,
  inline: string | null,
  expected: ExpectedDigest,
  where: { imageId: string; url: string },
) {
  if (inline !== null) verifyDigest(expected, inline, where.imageId, where.url);
  const checked =
    inline === null
      ? hash.digestOfFile(file).then((digest) => verifyDigest(expected, digest, where.imageId, where.url))
      : null;
  // Nobody waits for it when the disk cannot even be prepared; its failure must not go unhandled then.
  checked?.catch(() => undefined);
  let waited = false;
  return {
    /** Waits for the file's checksum, as a phase of its own the first time. */
    async verify(): Promise<void> {
      if (!checked) return;
      if (!waited) meter.start('verify', null);
      waited = true;
      await checked;
    },
    /** The error to report for a failure that damaged bytes may have caused: their checksum mismatch, if any. */
    async explain(err: unknown): Promise<unknown> {
      if (!checked || err instanceof ImageChecksumError) return err;
      return checked.then(
        () => err,
        (mismatch: unknown) => (mismatch instanceof ImageChecksumError ? mismatch : err),
      );
    },
  };
}
