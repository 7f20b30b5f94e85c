// The qcow2 header, read from the image's first bytes before anything is written: the geometry the
// streaming reader needs (cluster size, L1 table, refcount table, entry width, compression), checked so that
// a header which would make the reader exhaust memory, or place tables over each other, is refused at once.
// The format rules that qemu-img's own safety depends on (backing file, data file, encryption, unknown
// features) stay in ../inspect.ts and run first.
import { InvalidImage } from '../../errors.ts';
import { needsBuffer } from './spool.ts';

export const QCOW2_MAGIC = 0x514649fb;
const INCOMPAT_COMPRESSION = 1n << 3n;
const INCOMPAT_EXTENDED_L2 = 1n << 4n;
/** qemu refuses larger L1 tables (QCOW_MAX_L1_SIZE, 32 MiB); so do we, before allocating one. */
const MAX_L1_BYTES = 32 * 1024 * 1024;
/** qemu's limit for the refcount table (QCOW_MAX_REFTABLE_SIZE, 8 MiB). */
const MAX_REFTABLE_BYTES = 8 * 1024 * 1024;
/** qemu's limit on internal snapshots (QCOW_MAX_SNAPSHOTS). */
const MAX_SNAPSHOTS = 65536;

export type Qcow2Compression = 'zlib' | 'zstd';

export interface Qcow2Layout {
  clusterBits: number;
  clusterSize: number;
  virtualSize: number;
  l1Offset: number;
  l1Entries: number;
  /** 8 bytes, or 16 with extended L2 entries (an entry and its subcluster bitmap). */
  l2EntryBytes: 8 | 16;
  /** Entries per L2 table (one cluster). */
  l2Entries: number;
  compression: Qcow2Compression;
  /** Host byte ranges of the header and tables, which no L2 table or data cluster may overlap. */
  metadata: { start: number; end: number; what: string }[];
}

/** The refusal of a hostile or broken image, from the header, the tables or the claims on host clusters. */
export function refuse(why: string): never {
  throw new InvalidImage(`Security: qcow2 image refused: ${why}`);
}

function safeNumber(v: bigint, what: string): number {
  if (v > BigInt(Number.MAX_SAFE_INTEGER)) refuse(`${what} (${v}) is out of range`);
  return Number(v);
}

/**
 * Parses and checks the header. `deviceSize` bounds the virtual size; `declaredLength` (the server's length of
 * the uncompressed image, when known) must cover every table the header names.
 */
export function parseQcow2Header(head: Buffer, opts: { deviceSize: number; declaredLength?: number }): Qcow2Layout {
  if (head.length < 72 || head.readUInt32BE(0) !== QCOW2_MAGIC) refuse('not a qcow2 header');
  const version = head.readUInt32BE(4);
  if (version !== 2 && version !== 3) refuse(`version ${version} is not supported`);
  const clusterBits = head.readUInt32BE(20);
  if (clusterBits < 9 || clusterBits > 21) refuse(`cluster size 2^${clusterBits} is outside 512 B..2 MiB`);
  const clusterSize = 2 ** clusterBits;
  // qemu reads whole 512-byte sectors: a size between two is rounded down.
  const virtualSize = Math.floor(safeNumber(head.readBigUInt64BE(24), 'the virtual size') / 512) * 512;
  if (virtualSize > opts.deviceSize)
    refuse(`its virtual size (${virtualSize} bytes) is larger than the device (${opts.deviceSize} bytes)`);
  const l1Entries = head.readUInt32BE(36);
  const l1Offset = safeNumber(head.readBigUInt64BE(40), 'the L1 table offset');
  const reftableOffset = safeNumber(head.readBigUInt64BE(48), 'the refcount table offset');
  const reftableClusters = head.readUInt32BE(56);

  const snapshots = head.readUInt32BE(60);
  const snapshotsOffset = safeNumber(head.readBigUInt64BE(64), 'the snapshot table offset');
  if (snapshots > MAX_SNAPSHOTS) refuse(`its snapshot table (${snapshots} entries) is larger than qemu allows`);
  if (snapshotsOffset % clusterSize !== 0 || (snapshots > 0 && snapshotsOffset === 0))
    refuse(`its snapshot table offset ${snapshotsOffset} is not a cluster boundary after the header`);

  let l2EntryBytes: 8 | 16 = 8;
  let compression: Qcow2Compression = 'zlib';
  let headerLength = 72;
  if (version === 3) {
    if (head.length < 104) refuse('the version 3 header is truncated');
    const incompatible = head.readBigUInt64BE(72);
    headerLength = head.readUInt32BE(100);
    if (headerLength < 104 || headerLength > clusterSize || headerLength > head.length)
      refuse(`header length ${headerLength} is not possible`);
    // data-file-raw (autoclear bit 1) means nothing without the data file that inspect.ts refuses.
    if (head.readBigUInt64BE(88) & 2n) refuse('it declares its data in a raw data file');
    const refcountOrder = head.readUInt32BE(96);
    if (refcountOrder > 6) refuse(`refcount order ${refcountOrder} is larger than 6`);
    if (incompatible & INCOMPAT_EXTENDED_L2) {
      if (clusterBits < 14) refuse('extended L2 entries need clusters of at least 16 KiB');
      l2EntryBytes = 16;
    }
    // qemu insists that the feature bit and the type field agree.
    const type = headerLength > 104 ? head[104]! : 0;
    if (type > 1) refuse(`compression type ${type} is not known`);
    if (!!(incompatible & INCOMPAT_COMPRESSION) !== (type !== 0))
      refuse('its compression type and feature bit disagree');
    if (type === 1) compression = 'zstd';
  }
  checkExtensions(head, headerLength, clusterSize);
  // The reader could stream them, but qemu reads more of such an image: the buffered route takes it.
  if (snapshots > 0) throw needsBuffer('the qcow2 image has internal snapshots, which only qemu-img reads in full');
  const l2Entries = clusterSize / l2EntryBytes;
  const needed = Math.ceil(virtualSize / (clusterSize * l2Entries));
  if (l1Entries < needed)
    refuse(`its L1 table (${l1Entries} entries) cannot map the ${virtualSize} bytes its header states`);
  if (l1Entries * 8 > MAX_L1_BYTES) refuse(`its L1 table (${l1Entries} entries) is larger than qemu allows`);
  if (reftableClusters === 0) refuse('it has no refcount table');
  if (reftableClusters * clusterSize > MAX_REFTABLE_BYTES)
    refuse(`its refcount table (${reftableClusters} clusters) is larger than qemu allows`);
  if (l1Offset % clusterSize !== 0 || (l1Entries > 0 && l1Offset === 0))
    refuse(`its L1 table offset ${l1Offset} is not a cluster boundary after the header`);
  if (reftableOffset % clusterSize !== 0 || reftableOffset === 0)
    refuse(`its refcount table offset ${reftableOffset} is not a cluster boundary after the header`);

  const roundUp = (n: number) => Math.ceil(n / clusterSize) * clusterSize;
  const metadata = [
    { start: 0, end: clusterSize, what: 'the header' },
    { start: l1Offset, end: l1Offset + roundUp(l1Entries * 8), what: 'the L1 table' },
    { start: reftableOffset, end: reftableOffset + reftableClusters * clusterSize, what: 'the refcount table' },
  ].filter((r) => r.end > r.start);
  for (let i = 0; i < metadata.length; i++) {
    for (let j = i + 1; j < metadata.length; j++) {
      const a = metadata[i]!;
      const b = metadata[j]!;
      if (a.start < b.end && b.start < a.end) refuse(`${a.what} and ${b.what} overlap`);
    }
  }
  if (opts.declaredLength !== undefined) {
    const end = Math.max(
      ...metadata.map((r) => Math.min(r.end, r.start + (r.what === 'the L1 table' ? l1Entries * 8 : r.end - r.start))),
    );
    if (end > opts.declaredLength)
      refuse(`its tables end at byte ${end}, beyond its declared length of ${opts.declaredLength} bytes`);
  }
  return { clusterBits, clusterSize, virtualSize, l1Offset, l1Entries, l2EntryBytes, l2Entries, compression, metadata };
}

/** The header extensions must each fit in the header's cluster, as qemu requires when it opens the image. */
function checkExtensions(head: Buffer, headerLength: number, clusterSize: number): void {
  const end = Math.min(clusterSize, head.length);
  let at = headerLength;
  while (at + 8 <= end) {
    const type = head.readUInt32BE(at);
    const length = head.readUInt32BE(at + 4);
    if (type === 0) return;
    if (length > end - at - 8) refuse(`a header extension (type ${type.toString(16)}) runs past the header's cluster`);
    at += 8 + Math.ceil(length / 8) * 8;
  }
}
