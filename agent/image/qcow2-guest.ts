// Reads bytes of the disk a qcow2 buffer file describes, in-process: for the checks made before the disk is
// touched that need the guest's partition table and filesystem labels (the config drive's room). Runs only
// on a file that passed inspection and assertQcow2Within (no backing or data file, tables inside the file).
// Deflate-compressed clusters are inflated; what it cannot read (another compression) is answered null.
import { open } from 'node:fs/promises';
import { inflateRawSync, constants } from 'node:zlib';
import { readAt } from './read-at.ts';

const OFFSET_MASK = 0x00ff_ffff_ffff_fe00n;
const COMPRESSED = 1n << 62n;
/** Version 3: the cluster reads as zeros. */
const ZERO_FLAG = 1n;
const INCOMPAT_COMPRESSION_TYPE = 1n << 3n;

export interface Qcow2Guest {
  /** `length` bytes of the guest disk from `offset`, or null when a cluster cannot be decoded here. */
  read(offset: number, length: number): Promise<Buffer | null>;
  close(): Promise<void>;
}

export async function openQcow2Guest(file: string): Promise<Qcow2Guest> {
  const fh = await open(file, 'r');
  try {
    const header = await readAt(fh, 0, 112);
    const clusterBits = header.readUInt32BE(20);
    const cs = 2 ** clusterBits;
    const l1Size = header.readUInt32BE(36);
    const l1 = await readAt(fh, Number(header.readBigUInt64BE(40)), l1Size * 8);
    const version = header.readUInt32BE(4);
    const headerLength = version >= 3 ? header.readUInt32BE(100) : 72;
    const otherCompression =
      version >= 3 && (header.readBigUInt64BE(72) & INCOMPAT_COMPRESSION_TYPE) !== 0n && headerLength > 104 && header[104] !== 0;
    const perL2 = cs / 8;
    // The compressed cluster descriptor: host offset in the low x bits, extra 512-byte sectors above.
    const x = BigInt(62 - (clusterBits - 8));

    async function cluster(index: number): Promise<Buffer | null> {
      const l1i = Math.floor(index / perL2);
      if (l1i >= l1Size) return Buffer.alloc(cs);
      const l2Offset = Number(l1.readBigUInt64BE(l1i * 8) & OFFSET_MASK);
      if (l2Offset === 0) return Buffer.alloc(cs);
      const entry = (await readAt(fh, l2Offset + (index % perL2) * 8, 8)).readBigUInt64BE(0);
      if (entry & COMPRESSED) {
        if (otherCompression) return null;
        const host = entry & ((1n << x) - 1n);
        const sectors = Number((entry >> x) & ((1n << BigInt(clusterBits - 8)) - 1n)) + 1;
        const packed = await readAt(fh, Number(host), sectors * 512 - Number(host % 512n));
        try {
          const out = inflateRawSync(packed, { finishFlush: constants.Z_SYNC_FLUSH, maxOutputLength: cs });
          return out.length === cs ? out : Buffer.concat([out, Buffer.alloc(cs - out.length)]);
        } catch {
          return null;
        }
      }
      const host = Number(entry & OFFSET_MASK);
      if (host === 0 || entry & ZERO_FLAG) return Buffer.alloc(cs);
      const data = await readAt(fh, host, cs);
      return data.length === cs ? data : Buffer.concat([data, Buffer.alloc(cs - data.length)]);
    }

    return {
      async read(offset, length) {
        const out = Buffer.alloc(length);
        for (let at = offset; at < offset + length; ) {
          const data = await cluster(Math.floor(at / cs));
          if (!data) return null;
          const from = at % cs;
          const n = Math.min(cs - from, offset + length - at);
          data.copy(out, at - offset, from, from + n);
          at += n;
        }
        return out;
      },
      close: () => fh.close(),
    };
  } catch (err) {
    await fh.close();
    throw err;
  }
}
