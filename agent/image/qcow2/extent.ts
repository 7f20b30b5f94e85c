// A qcow2 file must hold every cluster its tables point at. qemu-img reads past the end of a truncated
// file as zeros and converts it without complaint, so a cut-off download (served with a matching checksum,
// or by a server that lied about its length) would be deployed as a disk of holes and reported a success.
// Checked on the buffer file before the disk is touched: the L1 table, every L2 table it names, every data
// cluster those name, and the refcount table, all within the file.
import { open } from 'node:fs/promises';
import { InvalidImage } from '../../errors.ts';
import { readAt } from './read-at.ts';

/** Bits 9–55 of an L1 or L2 entry: the host offset of the table or cluster. */
const OFFSET_MASK = 0x00ff_ffff_ffff_fe00n;
const COMPRESSED = 1n << 62n;
/** Incompatible feature bit 4 (version 3 headers): 16-byte L2 entries, each an entry and its subcluster bitmap. */
const EXTENDED_L2 = 1n << 4n;
/** The cluster sizes qemu accepts: 512 B to 2 MiB. */
const MIN_CLUSTER_BITS = 9;
const MAX_CLUSTER_BITS = 21;

/** Throws InvalidImage naming the first table or cluster that lies past the end of the `size`-byte file. */
export async function assertQcow2Within(file: string, size: number): Promise<void> {
  const fh = await open(file, 'r');
  try {
    const header = await readAt(fh, 0, 80);
    const version = header.length >= 8 ? header.readUInt32BE(4) : 0;
    const needs = version >= 3 ? 80 : 72;
    if (header.length < needs)
      throw new InvalidImage(`the qcow2 image is truncated: its header needs ${needs} bytes, the file has ${size}`);
    const entryBytes = version >= 3 && (header.readBigUInt64BE(72) & EXTENDED_L2) !== 0n ? 16 : 8;
    const clusterBits = header.readUInt32BE(20);
    if (clusterBits < MIN_CLUSTER_BITS || clusterBits > MAX_CLUSTER_BITS) {
      throw new InvalidImage(`the qcow2 image's cluster size (2^${clusterBits} bytes) is outside 512 B to 2 MiB`);
    }
    const clusterSize = 2 ** clusterBits;
    const l1Size = header.readUInt32BE(36);
    const l1Offset = Number(header.readBigUInt64BE(40));
    const refcountOffset = Number(header.readBigUInt64BE(48));
    const refcountClusters = header.readUInt32BE(56);
    const past = (what: string, end: number) => {
      if (end > size)
        throw new InvalidImage(
          `the qcow2 image is truncated: its ${what} reaches byte ${end}, past the end of the ${size}-byte file`,
        );
    };
    past('refcount table', refcountOffset + refcountClusters * clusterSize);
    past('L1 table', l1Offset + l1Size * 8);
    const l1 = await readAt(fh, l1Offset, l1Size * 8);
    // A hostile L1 may name one L2 table many times; each is read once.
    const seen = new Set<number>();
    for (let i = 0; i < l1Size; i++) {
      const l2Offset = Number(l1.readBigUInt64BE(i * 8) & OFFSET_MASK);
      if (l2Offset === 0 || seen.has(l2Offset)) continue;
      seen.add(l2Offset);
      past(`L2 table ${i}`, l2Offset + clusterSize);
      const l2 = await readAt(fh, l2Offset, clusterSize);
      for (let j = 0; j < clusterSize / entryBytes; j++) {
        const entry = l2.readBigUInt64BE(j * entryBytes);
        // A compressed cluster's offset is packed differently and its length varies; its read fails loudly in qemu-img.
        if (entry & COMPRESSED) continue;
        const offset = Number(entry & OFFSET_MASK);
        // Its start, not its end: a writer may leave the last cluster short, which qemu-img reads as zeros.
        if (offset !== 0) past(`data cluster ${i}:${j}`, offset + 1);
      }
    }
  } finally {
    await fh.close();
  }
}
