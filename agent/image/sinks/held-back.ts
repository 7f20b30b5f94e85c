// The parts of an image that make a disk look partitioned, kept in memory until the rest of the image is on the
// device, flushed and verified: the device's first MiB (MBR, primary GPT header and entries, most filesystem
// superblocks) and its last MiB (where a GPT's backup header sits when the image ends at the disk's end;
// sgdisk and blkid would rebuild a table from it). The device's ends were zeroed before the write (sink
// checkHead), so a process killed at any point before `commit` (SIGKILL, the OOM killer) leaves a disk that
// neither the kernel nor blkid nor sgdisk finds a partition table on. Only the pieces that touch these two
// ranges are copied; everything else passes through untouched.
import { open, type FileHandle } from 'node:fs/promises';
import { ImageWriteError, errorText } from '../../errors.ts';
import { writeAll } from '../../host/write-all.ts';
import type { DeviceGuard } from '../../safety/device-guard.ts';

const MiB = 1024 * 1024;
/** Direct I/O alignment: the range written directly ends on it. */
const ALIGN = 4096;

/** The device ranges an image's bytes are held back from: `[0, headEnd)` and `[tailStart, size)`. */
export function heldRanges(deviceSize: number): { headEnd: number; tailStart: number } {
  const headEnd = Math.min(MiB, deviceSize);
  const tailStart = Math.max(headEnd, Math.floor((deviceSize - MiB) / ALIGN) * ALIGN);
  return { headEnd, tailStart };
}

export class HeldBack {
  readonly headEnd: number;
  readonly tailStart: number;
  private readonly head: Buffer;
  private tail: Buffer | null = null;
  /** One past the last byte placed in each range (what `commit` writes). */
  private headUsed = 0;
  private tailUsed = 0;
  private committed = false;

  constructor(private readonly deviceSize: number) {
    ({ headEnd: this.headEnd, tailStart: this.tailStart } = heldRanges(deviceSize));
    this.head = Buffer.alloc(this.headEnd);
  }

  /** Whether `[offset, offset + length)` is wholly outside both held ranges (the common case: no copy). */
  passes(offset: number, length: number): boolean {
    return offset >= this.headEnd && offset + length <= this.tailStart;
  }

  /**
   * Keeps the parts of `data` (placed at `offset`) that fall in the held ranges; returns the part between them,
   * as `[from, to)` within `data`, which the caller writes itself (empty when from === to).
   */
  take(offset: number, data: Buffer): [number, number] {
    const end = offset + data.length;
    if (offset < this.headEnd) {
      const n = Math.min(end, this.headEnd) - offset;
      data.copy(this.head, offset, 0, n);
      this.headUsed = Math.max(this.headUsed, offset + n);
    }
    if (end > this.tailStart) {
      const from = Math.max(offset, this.tailStart);
      this.tail ??= Buffer.alloc(this.deviceSize - this.tailStart);
      data.copy(this.tail, from - this.tailStart, from - offset);
      this.tailUsed = Math.max(this.tailUsed, end - this.tailStart);
    }
    const from = Math.min(Math.max(offset, this.headEnd), end) - offset;
    const to = Math.max(Math.min(end, this.tailStart), offset + from) - offset;
    return [from, to];
  }

  /** Zeros placed at `offset`: kept like `take`'s bytes; returns the part between the ranges, as device offsets. */
  zero(offset: number, length: number): [number, number] {
    const end = offset + length;
    if (offset < this.headEnd) {
      this.head.fill(0, offset, Math.min(end, this.headEnd));
      this.headUsed = Math.max(this.headUsed, Math.min(end, this.headEnd));
    }
    if (end > this.tailStart) {
      this.tail ??= Buffer.alloc(this.deviceSize - this.tailStart);
      this.tail.fill(0, Math.max(offset, this.tailStart) - this.tailStart, end - this.tailStart);
      this.tailUsed = Math.max(this.tailUsed, end - this.tailStart);
    }
    const from = Math.min(Math.max(offset, this.headEnd), end);
    const to = Math.max(Math.min(end, this.tailStart), from);
    return [from, to];
  }

  /** The image's first `n` bytes as they will be on the device. */
  imageHead(n: number): Buffer {
    return Buffer.from(this.head.subarray(0, Math.min(n, this.headUsed)));
  }

  /** How many image bytes are held (for a decoding sink's count of what it wrote). */
  get bytes(): number {
    return this.headUsed + this.tailUsed;
  }

  /**
   * Writes the held bytes, the head first, and flushes the device. Called once the rest of the image is durable
   * and verified: from here on, the disk has the new partition table.
   */
  async commit(path: string, guard: DeviceGuard): Promise<void> {
    if (this.committed) return;
    await guard.assertWritable(path, 'write an image to');
    let fh: FileHandle | undefined;
    try {
      fh = await open(path, 'r+');
      if (this.headUsed > 0) await writeAll(fh, this.head, 0, this.headUsed, 0);
      if (this.tail && this.tailUsed > 0) await writeAll(fh, this.tail, 0, this.tailUsed, this.tailStart);
      await fh.datasync();
      this.committed = true;
    } catch (err) {
      throw new ImageWriteError(`writing the first and last MiB of the image to ${path} failed: ${errorText(err)}`);
    } finally {
      await fh?.close().catch(() => undefined);
    }
  }
}
