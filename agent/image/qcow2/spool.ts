// Host clusters that arrived before the table saying what they are, kept in RAM until it comes. The budget
// covers the kept bytes and the bookkeeping for clusters mapped ahead of the stream; going over it does not
// fail the deploy but sends it to the buffered route (an ImageWriteError with `needsBuffer`).
import { ImageWriteError } from '../../errors.ts';

/** The error that sends an image the reader cannot stream to the buffered route. */
export function needsBuffer(why: string): ImageWriteError {
  return new ImageWriteError(why, { needsBuffer: true });
}

/** Bookkeeping charged per cluster mapped ahead of the stream (a Map entry and its record). */
export const AHEAD_ENTRY_BYTES = 96;

export interface Spooled {
  bytes: Buffer;
  /** Holds compressed data: shared by several compressed clusters, never claimable as a whole cluster. */
  compressed: boolean;
}

export class Spool {
  private readonly kept = new Map<number, Spooled>();
  private keptBytes = 0;
  private aheadBytes = 0;
  peak = 0;

  constructor(readonly budget: number) {}

  get bytes(): number {
    return this.keptBytes;
  }

  keep(cluster: number, bytes: Buffer, compressed: boolean): void {
    // A copy: the chunk it came in is far larger than a small cluster.
    this.kept.set(cluster, { bytes: Buffer.from(bytes), compressed });
    this.keptBytes += bytes.length;
    this.check();
  }

  get(cluster: number): Spooled | undefined {
    return this.kept.get(cluster);
  }

  take(cluster: number): Spooled | undefined {
    const s = this.kept.get(cluster);
    if (s) this.drop(cluster);
    return s;
  }

  drop(cluster: number): void {
    const s = this.kept.get(cluster);
    if (!s) return;
    this.kept.delete(cluster);
    this.keptBytes -= s.bytes.length;
  }

  /** The kept clusters, as a copy (the caller may drop them while going through). */
  clusters(): number[] {
    return [...this.kept.keys()];
  }

  /** Charges (or, negative, returns) bookkeeping for clusters mapped ahead of the stream. */
  charge(bytes: number): void {
    this.aheadBytes += bytes;
    this.check();
  }

  private check(): void {
    const used = this.keptBytes + this.aheadBytes;
    this.peak = Math.max(this.peak, used);
    if (used > this.budget) {
      throw needsBuffer(
        `the qcow2 image places more data before its tables than the streaming spool may hold (${this.budget} bytes)`,
      );
    }
  }
}
