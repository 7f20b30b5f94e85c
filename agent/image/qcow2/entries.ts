// L1 and L2 table entries, decoded with 32-bit reads (a BigInt per entry cost seconds on images with
// millions of small clusters). Reserved bits that qemu treats as corruption are refused here too.
import { refuse } from './header.ts';

const TWO32 = 2 ** 32;

/** What one guest cluster reads as. */
export type Mapping =
  | { kind: 'zero' }
  /** `subclusters`: with extended L2 entries, the bitmap of the 32 subclusters that hold data (the rest read zero). */
  | { kind: 'data'; host: number; subclusters: number | null }
  | { kind: 'compressed'; host: number; length: number };

/** The host offset of the L2 table an L1 entry points to; 0 when the range is unallocated. */
export function l1Entry(table: Buffer, index: number, clusterSize: number): number {
  const hi = table.readUInt32BE(index * 8);
  const lo = table.readUInt32BE(index * 8 + 4);
  if ((hi & 0x7f000000) !== 0 || (lo & 0x1ff) !== 0) refuse(`L1 entry ${index} has reserved bits set`);
  const offset = (hi & 0x00ffffff) * TWO32 + lo;
  if (offset % clusterSize !== 0) refuse(`L1 entry ${index} points inside a cluster (${offset})`);
  return offset;
}

/** Decodes L2 entry `index` of `table`; `entryBytes` is 16 for extended L2 entries. */
export function l2Entry(table: Buffer, index: number, clusterBits: number, entryBytes: 8 | 16): Mapping {
  const at = index * entryBytes;
  const hi = table.readUInt32BE(at);
  const lo = table.readUInt32BE(at + 4);
  const clusterSize = 2 ** clusterBits;
  if (hi & 0x40000000) {
    const shift = 62 - (clusterBits - 8) - 32;
    const host = (hi & ((1 << shift) - 1)) * TWO32 + lo;
    const sectors = ((hi >>> shift) & ((1 << (clusterBits - 8)) - 1)) + 1;
    if (entryBytes === 16 && (table.readUInt32BE(at + 8) | table.readUInt32BE(at + 12)) !== 0) {
      refuse(`compressed L2 entry ${index} has a subcluster bitmap`);
    }
    return { kind: 'compressed', host, length: sectors * 512 - (host % 512) };
  }
  if ((hi & 0x3f000000) !== 0 || (lo & 0x1fe) !== 0) refuse(`L2 entry ${index} has reserved bits set`);
  const host = (hi & 0x00ffffff) * TWO32 + (lo >>> 9) * 512;
  if (host % clusterSize !== 0) refuse(`L2 entry ${index} points inside a cluster (${host})`);
  if (entryBytes === 8) {
    if (lo & 1 || host === 0) return { kind: 'zero' };
    return { kind: 'data', host, subclusters: null };
  }
  if (lo & 1) refuse(`extended L2 entry ${index} uses the zero flag`);
  // The bitmap: allocated subclusters in the low 32 bits, zero ones in the high 32.
  const zeros = table.readUInt32BE(at + 8);
  const alloc = table.readUInt32BE(at + 12);
  if ((zeros & alloc) !== 0) refuse(`extended L2 entry ${index} marks a subcluster both zero and allocated`);
  if (host === 0) {
    if (alloc !== 0) refuse(`extended L2 entry ${index} has allocated subclusters but no cluster`);
    return { kind: 'zero' };
  }
  if (alloc === 0) return { kind: 'zero' };
  return { kind: 'data', host, subclusters: alloc >>> 0 };
}
