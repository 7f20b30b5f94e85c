// Who owns each host cluster: the header and tables named by the header, the L2 tables named by L1, the
// data and compressed clusters named by L2. A second claim on a cluster, or a table or data cluster over the
// header's tables, is refused: qemu would read one set of bytes twice, which no image qemu-img writes does,
// and which a hostile image uses to make two guest ranges, or a table and data, alias.
import { refuse, type Qcow2Layout } from './header.ts';
import { AHEAD_ENTRY_BYTES, type Spool } from './spool.ts';

export type Role = { kind: 'l2'; l1Index: number } | { kind: 'data'; guest: number; subclusters: number | null };

/** One compressed cluster's stored bytes, gathered from the host clusters it spans as they pass. */
export class CompressedRange {
  private buf: Buffer | null = null;
  got = 0;
  /** Once decoded: the bytes the compressed data really took, which alone count as covered. */
  used: number | null = null;
  constructor(
    readonly host: number,
    readonly length: number,
    readonly guest: number,
  ) {}

  /** Copies the part of host bytes `bytes` (starting at host offset `start`) that belongs to this range. */
  feed(start: number, bytes: Buffer): void {
    const from = Math.max(start, this.host);
    const to = Math.min(start + bytes.length, this.host + this.length);
    if (to <= from) return;
    // Allocated only once its bytes arrive: an L2 table may name thousands of ranges ahead of the stream.
    this.buf ??= Buffer.alloc(this.length);
    bytes.copy(this.buf, from - this.host, from - start, to - start);
    this.got += to - from;
  }

  get complete(): boolean {
    return this.got >= this.length;
  }

  /** The stored bytes; past the end of the image they read as zeros, as qemu reads them. */
  get bytes(): Buffer {
    return this.buf ?? Buffer.alloc(this.length);
  }
}

export class Claims {
  /** Clusters not yet received whose role is known. */
  readonly ahead = new Map<number, Role>();
  /** Clusters (not yet received, or kept in the spool) that hold compressed data, with the ranges there. */
  readonly compressedAt = new Map<number, CompressedRange[]>();
  private readonly l2Seen = new Set<number>();

  constructor(
    private readonly layout: Qcow2Layout,
    private readonly spool: Spool,
    private readonly declaredLength: number | undefined,
  ) {}

  metadataAt(cluster: number): string | null {
    const at = cluster * this.layout.clusterSize;
    for (const m of this.layout.metadata) if (at >= m.start && at < m.end) return m.what;
    return null;
  }

  private checkFree(cluster: number, what: string): void {
    const meta = this.metadataAt(cluster);
    if (meta) refuse(`${what} lies over ${meta}`);
    if (this.ahead.has(cluster) || this.l2Seen.has(cluster))
      refuse(`${what} is claimed twice (host cluster ${cluster})`);
    if (this.declaredLength !== undefined && cluster * this.layout.clusterSize >= this.declaredLength) {
      refuse(`${what} lies beyond its declared length of ${this.declaredLength} bytes`);
    }
  }

  /**
   * Claims a whole cluster for `role`. Returns the bytes when the cluster already passed and was kept,
   * null when it is still to come.
   */
  claim(cluster: number, role: Role, current: number, what: string): Buffer | null {
    this.checkFree(cluster, what);
    if (this.compressedAt.has(cluster)) refuse(`${what} overlaps compressed data (host cluster ${cluster})`);
    if (role.kind === 'l2') this.l2Seen.add(cluster);
    if (cluster >= current) {
      this.ahead.set(cluster, role);
      this.spool.charge(AHEAD_ENTRY_BYTES);
      return null;
    }
    const kept = this.spool.take(cluster);
    if (!kept || kept.compressed) refuse(`${what} is claimed twice (host cluster ${cluster} was already used)`);
    return kept.bytes;
  }

  /** The role of a cluster as it arrives, forgotten as it is returned. */
  arrive(cluster: number): Role | undefined {
    const role = this.ahead.get(cluster);
    if (role) {
      this.ahead.delete(cluster);
      this.spool.charge(-AHEAD_ENTRY_BYTES);
    }
    return role;
  }

  /** Records a compressed range on every host cluster it touches; the caller feeds it the bytes already kept. */
  claimCompressed(range: CompressedRange, what: string): number[] {
    const size = this.layout.clusterSize;
    const first = Math.floor(range.host / size);
    const last = Math.floor((range.host + range.length - 1) / size);
    const touched: number[] = [];
    for (let c = first; c <= last; c++) {
      const meta = this.metadataAt(c);
      if (meta) refuse(`${what} lies over ${meta}`);
      if (this.ahead.has(c) || this.l2Seen.has(c))
        refuse(`${what} overlaps a table or data cluster (host cluster ${c})`);
      if (c === first && this.declaredLength !== undefined && range.host >= this.declaredLength) {
        refuse(`${what} lies beyond its declared length of ${this.declaredLength} bytes`);
      }
      const list = this.compressedAt.get(c);
      if (list) list.push(range);
      else this.compressedAt.set(c, [range]);
      this.spool.charge(AHEAD_ENTRY_BYTES);
      touched.push(c);
    }
    return touched;
  }

  /** Whether the decoded compressed data on a cluster covers every byte of it (none is still to be decoded). */
  covered(cluster: number): boolean {
    const size = this.layout.clusterSize;
    const start = cluster * size;
    const spans = (this.compressedAt.get(cluster) ?? [])
      .map((r) => [Math.max(r.host, start), Math.min(r.host + (r.used ?? r.length), start + size)] as const)
      .sort((a, b) => a[0] - b[0]);
    if ((this.compressedAt.get(cluster) ?? []).some((r) => r.used === null)) return false;
    let reach = start;
    for (const [s, e] of spans) {
      if (s > reach) return false;
      reach = Math.max(reach, e);
    }
    return reach >= start + size;
  }

  /** Forgets a cluster's compressed ranges once it is no longer needed. */
  forgetCompressed(cluster: number): void {
    const list = this.compressedAt.get(cluster);
    if (!list) return;
    this.compressedAt.delete(cluster);
    this.spool.charge(-AHEAD_ENTRY_BYTES * list.length);
  }
}
