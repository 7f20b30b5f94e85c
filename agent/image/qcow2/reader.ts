// The streaming qcow2 reader: the image's bytes go in once, in order, and come out as positional writes of
// guest data (and zeros) for the device. Each host cluster is judged as it passes: header and L1 table (the
// header says where), an L2 table (L1 said so), a data cluster or compressed data (an L2 table said so), or
// not yet known, which is kept in the spool until a later table names it or until every table has been
// read (then it is unused: refcounts, freed clusters, snapshots). Every guest byte in [0, virtual size) is
// written exactly once, data or zeros, so the device ends up as `qemu-img convert -O raw` would leave it.
import { InvalidImage } from '../../errors.ts';
import { assertNotFreed, freeDownloaded } from '../downloaded-chunks.ts';
import { CompressedRange, Claims } from './claims.ts';
import { l1Entry, l2Entry } from './entries.ts';
import { refuse, type Qcow2Layout } from './header.ts';
import { inflateCluster } from './inflate.ts';
import { needsBuffer, Spool } from './spool.ts';

/** Where the reader's output goes: the device (positional-writer.ts), or memory in tests. */
export interface WriteTarget {
  /**
   * Writes `data` at guest offset `offset`. `data` may be kept until the returned promise resolves, never after:
   * the reader frees the downloaded chunks it came from once `push` returns, and a freed view reads as empty.
   */
  write(offset: number, data: Buffer): Promise<void>;
  /** Writes `length` zero bytes at `offset`. */
  zero(offset: number, length: number): Promise<void>;
}

export class Qcow2Reader {
  private readonly claims: Claims;
  private readonly spool: Spool;
  private readonly l1: Buffer;
  private l1Received = 0;
  private l1Done = false;
  private l2Outstanding = 0;
  /** Every L2 table is read: clusters nobody claimed are unused and need not be kept. */
  private allTablesKnown = false;
  /** Bytes of the image consumed, always at a cluster boundary between `push` calls except for `carry`. */
  private position = 0;
  private readonly carry: Buffer[] = [];
  private carried = 0;
  /** Chunks pushed earlier whose memory a piece in `carry` still lies in. */
  private readonly carrying: Buffer[] = [];
  /** Guest bytes written (data and zeros). */
  written = 0;

  constructor(
    private readonly layout: Qcow2Layout,
    private readonly target: WriteTarget,
    opts: { spoolBudget: number; declaredLength?: number },
  ) {
    this.spool = new Spool(opts.spoolBudget);
    this.claims = new Claims(layout, this.spool, opts.declaredLength);
    this.l1 = Buffer.alloc(layout.l1Entries * 8);
    // An empty image has no tables to wait for.
    if (this.l1.length === 0) this.l1Done = this.allTablesKnown = true;
  }

  get spoolPeak(): number {
    return this.spool.peak;
  }

  /** Feeds the next bytes of the image. */
  async push(chunk: Buffer): Promise<void> {
    assertNotFreed(chunk, 'the qcow2 reader');
    const size = this.layout.clusterSize;
    let at = 0;
    while (at < chunk.length) {
      if (this.carried === 0 && chunk.length - at >= size) {
        await this.cluster([chunk.subarray(at, at + size)], size);
        at += size;
        continue;
      }
      const take = Math.min(size - this.carried, chunk.length - at);
      this.carry.push(chunk.subarray(at, at + take));
      this.carried += take;
      at += take;
      if (this.carried === size) await this.flushCarry();
    }
    this.letGo(chunk);
  }

  /**
   * Frees the downloaded chunks the reader is done with (downloaded-chunks.ts): the reader is their last reader,
   * since the stages before it copy what they keep, and so do the spool, the tables and the writer (before its
   * promise resolves). Only `carry` holds pieces of chunks across pushes, until their cluster is whole.
   */
  private letGo(chunk: Buffer): void {
    // In place and without closures: this runs once per socket read.
    this.carrying.push(chunk);
    let kept = 0;
    for (const c of this.carrying) {
      if (this.carries(c)) this.carrying[kept++] = c;
      else freeDownloaded(c);
    }
    this.carrying.length = kept;
  }

  private carries(chunk: Buffer): boolean {
    for (const piece of this.carry) if (piece.buffer === chunk.buffer) return true;
    return false;
  }

  /** The image has ended: a cluster its tables still expect means it was cut short. */
  async end(): Promise<void> {
    if (this.carried > 0) await this.flushCarry();
    if (!this.l1Done && this.layout.l1Entries > 0) this.truncated('its L1 table');
    for (const [cluster, ranges] of this.claims.compressedAt) {
      for (const r of ranges) {
        if (r.complete) continue;
        if (r.got === 0 && r.host >= this.position) this.truncated(`compressed data at host offset ${r.host}`);
        r.got = r.length;
        // The tail of the last compressed cluster may stop short of its sector rounding.
        await this.finishCompressed(r);
      }
      this.claims.forgetCompressed(cluster);
    }
    const missing = this.claims.ahead.keys().next();
    if (!missing.done) this.truncated(`host cluster ${missing.value} that its tables map`);
  }

  private truncated(what: string): never {
    throw new InvalidImage(`the qcow2 image ends at byte ${this.position}, before ${what}: it is truncated`);
  }

  private async flushCarry(): Promise<void> {
    const pieces = this.carry.splice(0);
    for (const piece of pieces) assertNotFreed(piece, 'the qcow2 reader');
    const length = this.carried;
    this.carried = 0;
    await this.cluster(pieces, length);
  }

  /**
   * One host cluster (shorter only at the end of the image), in the pieces it arrived in: a data cluster,
   * the bulk of an image, is written piece by piece, since joining them cost a copy and an allocation each.
   */
  private async cluster(pieces: Buffer[], length: number): Promise<void> {
    const size = this.layout.clusterSize;
    const index = this.position / size;
    const start = this.position;
    this.position += length;
    let joined: Buffer | undefined;
    const bytes = () => (joined ??= pieces.length === 1 ? pieces[0]! : Buffer.concat(pieces, length));

    const meta = this.claims.metadataAt(index);
    if (meta === 'the L1 table') await this.l1Part(start, bytes());
    const role = this.claims.arrive(index);
    if (role?.kind === 'l2') await this.l2Table(bytes(), role.l1Index);
    else if (role?.kind === 'data') {
      if (pieces.length > 1 && this.wholeData(length, role.guest, role.subclusters))
        await this.dataPieces(pieces, role.guest);
      else await this.data(bytes(), role.guest, role.subclusters);
    }

    const ranges = this.claims.compressedAt.get(index);
    if (ranges) {
      for (const r of ranges) {
        let at = start;
        for (const piece of pieces) {
          r.feed(at, piece);
          at += piece.length;
        }
        if (r.complete) await this.finishCompressed(r);
      }
      // A range still short of bytes (the image's last, partial cluster) is finished by end().
      const pending = ranges.some((r) => !r.complete);
      if (!pending && (this.allTablesKnown || this.claims.covered(index))) this.claims.forgetCompressed(index);
      else if (!this.allTablesKnown) this.spool.keep(index, bytes(), true);
    } else if (!meta && !role && !this.allTablesKnown) {
      this.spool.keep(index, bytes(), false);
    }
  }

  private async l1Part(start: number, bytes: Buffer): Promise<void> {
    const from = start - this.layout.l1Offset;
    const n = Math.min(bytes.length, this.l1.length - from);
    if (n <= 0) return;
    bytes.copy(this.l1, from, 0, n);
    this.l1Received += n;
    if (this.l1Received === this.l1.length) await this.l1Table();
  }

  private async l1Table(): Promise<void> {
    const { clusterSize, l2Entries, virtualSize } = this.layout;
    const span = clusterSize * l2Entries;
    const current = this.position / clusterSize;
    const used = Math.ceil(virtualSize / span);
    const seen = new Set<number>();
    const ready: { table: Buffer; index: number }[] = [];
    for (let i = 0; i < used; i++) {
      const offset = l1Entry(this.l1, i, clusterSize);
      const guest = i * span;
      if (offset === 0) {
        await this.zeros(guest, Math.min(span, virtualSize - guest));
        continue;
      }
      if (seen.has(offset)) refuse(`L1 entries name one L2 table twice (host offset ${offset})`);
      seen.add(offset);
      this.l2Outstanding++;
      const kept = this.claims.claim(
        offset / clusterSize,
        { kind: 'l2', l1Index: i },
        current,
        `the L2 table of L1 entry ${i}`,
      );
      if (kept) ready.push({ table: kept, index: i });
    }
    this.l1Done = true;
    for (const r of ready) await this.l2Table(r.table, r.index);
    this.checkAllKnown();
  }

  private async l2Table(table: Buffer, l1Index: number): Promise<void> {
    const { clusterSize, clusterBits, l2Entries, l2EntryBytes, virtualSize } = this.layout;
    if (table.length < clusterSize) table = Buffer.concat([table, Buffer.alloc(clusterSize - table.length)]);
    const current = this.position / clusterSize;
    let zeroFrom = -1;
    let zeroTo = -1;
    const flushZeros = async () => {
      if (zeroTo > zeroFrom) await this.zeros(zeroFrom, zeroTo - zeroFrom);
      zeroFrom = zeroTo = -1;
    };
    for (let j = 0; j < l2Entries; j++) {
      const guest = (l1Index * l2Entries + j) * clusterSize;
      if (guest >= virtualSize) break;
      const m = l2Entry(table, j, clusterBits, l2EntryBytes);
      if (m.kind === 'zero') {
        if (zeroTo !== guest) {
          await flushZeros();
          zeroFrom = guest;
        }
        zeroTo = Math.min(guest + clusterSize, virtualSize);
        continue;
      }
      await flushZeros();
      const what = `the cluster at guest offset ${guest}`;
      if (m.kind === 'data') {
        const kept = this.claims.claim(
          m.host / clusterSize,
          { kind: 'data', guest, subclusters: m.subclusters },
          current,
          what,
        );
        if (kept) await this.data(kept, guest, m.subclusters);
      } else {
        await this.compressed(new CompressedRange(m.host, m.length, guest), what);
      }
    }
    await flushZeros();
    this.l2Outstanding--;
    this.checkAllKnown();
  }

  private async compressed(range: CompressedRange, what: string): Promise<void> {
    const size = this.layout.clusterSize;
    const current = this.position / size;
    for (const c of this.claims.claimCompressed(range, what)) {
      if (c >= current) continue;
      const kept = this.spool.get(c);
      // qemu may tuck a small compressed cluster into the sector rounding of the one before it: not a verdict
      // on the image, the buffered route can read it.
      if (!kept) throw needsBuffer(`${what} is compressed data that came before its table and was not kept`);
      kept.compressed = true;
      range.feed(c * size, kept.bytes);
    }
    if (range.complete) await this.finishCompressed(range);
  }

  private async finishCompressed(range: CompressedRange): Promise<void> {
    const { clusterSize, compression, virtualSize } = this.layout;
    const { out, used } = inflateCluster(compression, range.bytes, clusterSize, range.guest);
    range.used = used;
    this.releasePassed(range);
    await this.emit(range.guest, out.subarray(0, Math.min(clusterSize, virtualSize - range.guest)));
  }

  /**
   * Drops the passed clusters a decoded range leaves wholly accounted for. A compressed cluster that runs on
   * into the next host cluster keeps the one it started in until it is decoded; without this, a packed image
   * (`qemu-img convert -c`, where nearly every host cluster ends inside such a range) would hold nearly
   * every cluster until its last table arrived.
   */
  private releasePassed(range: CompressedRange): void {
    const size = this.layout.clusterSize;
    const first = Math.floor(range.host / size);
    const last = Math.floor((range.host + range.length - 1) / size);
    for (let c = first; c <= last; c++) {
      // The cluster being read is judged by cluster() itself, once all its ranges are fed.
      if (!this.spool.get(c) || !this.claims.covered(c)) continue;
      this.spool.drop(c);
      this.claims.forgetCompressed(c);
    }
  }

  /** Whether a data cluster of `length` bytes goes to the device as it is: all of it data, none past the end. */
  private wholeData(length: number, guest: number, subclusters: number | null): boolean {
    const full = subclusters === null || subclusters === 0xffffffff;
    return full && length === this.layout.clusterSize && guest + length <= this.layout.virtualSize;
  }

  /** A data cluster that `wholeData` accepted, written in the pieces it arrived in. */
  private async dataPieces(pieces: Buffer[], guest: number): Promise<void> {
    let at = guest;
    for (const piece of pieces) {
      await this.emit(at, piece);
      at += piece.length;
    }
  }

  private async data(bytes: Buffer, guest: number, subclusters: number | null): Promise<void> {
    const { clusterSize, virtualSize } = this.layout;
    const length = Math.min(clusterSize, virtualSize - guest);
    if (bytes.length < length) bytes = Buffer.concat([bytes, Buffer.alloc(length - bytes.length)]);
    if (subclusters === null || subclusters === 0xffffffff) {
      await this.emit(guest, bytes.subarray(0, length));
      return;
    }
    const sub = clusterSize / 32;
    const out = Buffer.from(bytes.subarray(0, length));
    for (let k = 0; k < 32; k++) {
      if (!((subclusters >>> k) & 1)) out.fill(0, Math.min(k * sub, length), Math.min((k + 1) * sub, length));
    }
    await this.emit(guest, out);
  }

  private async emit(guest: number, data: Buffer): Promise<void> {
    if (data.length === 0) return;
    if (guest < 0 || guest + data.length > this.layout.virtualSize)
      throw new Error(`internal: write at ${guest}+${data.length} outside the image`);
    this.written += data.length;
    await this.target.write(guest, data);
  }

  private async zeros(guest: number, length: number): Promise<void> {
    if (length <= 0) return;
    if (guest < 0 || guest + length > this.layout.virtualSize)
      throw new Error(`internal: zeros at ${guest}+${length} outside the image`);
    this.written += length;
    await this.target.zero(guest, length);
  }

  private checkAllKnown(): void {
    if (!this.l1Done || this.l2Outstanding > 0 || this.allTablesKnown) return;
    this.allTablesKnown = true;
    // Whatever is still kept was never claimed, except compressed clusters whose ranges are still being fed.
    for (const c of this.spool.clusters()) {
      if ((this.claims.compressedAt.get(c) ?? []).some((r) => !r.complete)) continue;
      this.spool.drop(c);
      this.claims.forgetCompressed(c);
    }
  }
}
