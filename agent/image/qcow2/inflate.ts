// One compressed cluster decoded in-process: raw deflate (qemu's zlib, no header) or one zstd frame.
// The output is bounded to one cluster, so a cluster that inflates beyond it is refused rather than
// allowed to allocate; one that comes out shorter is refused too, as qemu refuses to read it.
// The stored length is rounded up to whole sectors and so may run into the next compressed cluster; deflate
// stops at its own end, and a zstd frame's length is read from its block headers before it is decoded.
import { inflateRawSync, zstdDecompressSync } from 'node:zlib';
import { InvalidImage } from '../../errors.ts';
import type { Qcow2Compression } from './header.ts';

function broken(guest: number, why: string): never {
  throw new InvalidImage(`the qcow2 image's compressed cluster at guest offset ${guest} cannot be decoded: ${why}`);
}

/** The length of the zstd frame at the start of `data`, from its header and block headers. */
export function zstdFrameLength(data: Buffer): number | null {
  if (data.length < 6 || data.readUInt32LE(0) !== 0xfd2fb528) return null;
  const descriptor = data[4]!;
  const singleSegment = (descriptor >> 5) & 1;
  const fcsFlag = descriptor >> 6;
  const dictFlag = descriptor & 3;
  const checksum = (descriptor >> 2) & 1;
  let at = 5 + (singleSegment ? 0 : 1) + [0, 1, 2, 4][dictFlag]! + [singleSegment, 2, 4, 8][fcsFlag]!;
  for (;;) {
    if (at + 3 > data.length) return null;
    const header = data.readUIntLE(at, 3);
    const last = header & 1;
    const type = (header >> 1) & 3;
    const size = header >>> 3;
    if (type === 3) return null;
    at += 3 + (type === 1 ? 1 : size);
    if (last) break;
  }
  at += checksum ? 4 : 0;
  return at <= data.length ? at : null;
}

/**
 * Decodes one compressed cluster (its stored bytes, `data`) to exactly `clusterSize` bytes; `used` is how many
 * stored bytes the compressed data really took (the rest may belong to the next compressed cluster).
 */
export function inflateCluster(
  kind: Qcow2Compression,
  data: Buffer,
  clusterSize: number,
  guest: number,
): { out: Buffer; used: number } {
  let out: Buffer;
  let used: number;
  try {
    if (kind === 'zlib') {
      const r = inflateRawSync(data, { maxOutputLength: clusterSize, info: true }) as unknown as {
        buffer: Buffer;
        engine: { bytesWritten: number };
      };
      out = r.buffer;
      used = r.engine.bytesWritten;
    } else {
      const length = zstdFrameLength(data);
      if (length === null) broken(guest, 'no complete zstd frame');
      out = zstdDecompressSync(data.subarray(0, length), { maxOutputLength: clusterSize });
      used = length;
    }
  } catch (err) {
    if (err instanceof InvalidImage) throw err;
    const e = err as NodeJS.ErrnoException;
    if (e.code === 'ERR_BUFFER_TOO_LARGE') broken(guest, `it inflates beyond one cluster (${clusterSize} bytes)`);
    broken(guest, e.message);
  }
  if (out.length !== clusterSize) broken(guest, `it inflates to ${out.length} bytes, not one cluster (${clusterSize})`);
  return { out, used };
}
