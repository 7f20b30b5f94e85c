// The reader's positional writes onto a device, with O_DIRECT as sinks/block-writer.ts writes raw images (the
// same reasons: no page-cache copy, the disk kept busy). Writes that continue one another are gathered into
// 2 MiB page-aligned blocks, up to eight in flight. O_DIRECT needs 4 KiB alignment on a 4K-sector disk;
// pieces of a 4 KiB block (512-byte clusters, odd virtual sizes) are gathered in memory until the block is
// whole, and whatever is still partial at the end (the image's last bytes) goes through the page cache.
// Long runs of zeros (unallocated and zero clusters) are zeroed by the device itself, as qemu-img does onto a
// host device (device-zeroing.ts): the agent then neither copies nor sends those bytes.
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { ImageWriteError, errorText } from '../../errors.ts';
import { writeAll } from '../../host/write-all.ts';
import type { Logger } from '../../log.ts';
import type { DeviceGuard } from '../../safety/device-guard.ts';
import type { HeldBack } from '../sinks/held-back.ts';
import { DeviceZeroing } from './device-zeroing.ts';
import type { WriteTarget } from './reader.ts';

const MiB = 1024 * 1024;
const BLOCK = 2 * MiB;
const DEPTH = 8;
const ALIGN = 4096;
/** Zero runs at least this long go to the device's zeroing; shorter ones are not worth a tool's start. */
const ZEROOUT_MIN = 4 * MiB;

/** A `put` source of zeros. */
const fill = (block: Buffer, at: number, _from: number, n: number) => void block.fill(0, at, at + n);

declare const WebAssembly: { Memory: new (descriptor: { initial: number }) => { buffer: ArrayBuffer } };

interface Partial {
  bytes: Buffer;
  spans: [number, number][];
  filled: number;
}

export class PositionalWriter implements WriteTarget {
  private readonly blocks: Buffer[];
  /** An aligned 4 KiB block for partial blocks once they are whole. */
  private readonly single: Buffer;
  private singleWrite: Promise<void> = Promise.resolve();
  private readonly inFlight: Promise<void>[] = [];
  private slot = 0;
  private runStart = -1;
  private fill = 0;
  private failure: Error | null = null;
  private readonly partials = new Map<number, Partial>();
  private closed = false;
  private released: Promise<void> | null = null;
  /** Once the device refused a range, zeros are written from memory; finish() writes the ranges it refused. */
  private readonly zeroing: DeviceZeroing;

  private constructor(
    private readonly fh: FileHandle,
    private readonly path: string,
    /** Nothing is written at or past this offset (the image's virtual size). */
    private readonly limit: number,
    private readonly log: Logger,
    /** The device's first and last MiB, kept in memory until the sink commits them. */
    private readonly held: HeldBack | null,
  ) {
    const memory = new WebAssembly.Memory({ initial: (DEPTH * BLOCK) / 65536 + 1 });
    this.blocks = Array.from({ length: DEPTH }, (_, i) => Buffer.from(memory.buffer, i * BLOCK, BLOCK));
    this.single = Buffer.from(memory.buffer, DEPTH * BLOCK, ALIGN);
    this.inFlight = new Array(DEPTH).fill(Promise.resolve());
    this.zeroing = new DeviceZeroing(path);
  }

  static async open(
    path: string,
    limit: number,
    guard: DeviceGuard,
    log: Logger,
    held: HeldBack | null = null,
  ): Promise<PositionalWriter> {
    await guard.assertWritable(path, 'write an image to');
    try {
      return new PositionalWriter(await open(path, constants.O_RDWR | constants.O_DIRECT), path, limit, log, held);
    } catch (err) {
      throw new ImageWriteError(`cannot open ${path} for writing with direct I/O (O_DIRECT): ${errorText(err)}`);
    }
  }

  async write(offset: number, data: Buffer): Promise<void> {
    this.bounds(offset, data.length);
    if (this.held && !this.held.passes(offset, data.length)) {
      const [from, to] = this.held.take(offset, data);
      if (to > from) await this.write(offset + from, data.subarray(from, to));
      return;
    }
    await this.put(offset, data.length, (block, at, from, n) => data.copy(block, at, from, from + n));
  }

  async zero(offset: number, length: number): Promise<void> {
    this.bounds(offset, length);
    if (this.held && !this.held.passes(offset, length)) {
      const [from, to] = this.held.zero(offset, length);
      if (to > from) await this.zero(from, to - from);
      return;
    }
    const start = Math.ceil(offset / ALIGN) * ALIGN;
    const end = Math.floor((offset + length) / ALIGN) * ALIGN;
    if (!this.zeroing.working || end - start < ZEROOUT_MIN) {
      await this.put(offset, length, fill);
      return;
    }
    // Each guest byte is placed once, so no write in flight covers the range the device zeroes.
    await this.put(offset, start - offset, fill);
    this.zeroing.add(start, end - start);
    await this.put(end, offset + length - end, fill);
  }

  private bounds(offset: number, length: number): void {
    if (offset < 0 || offset + length > this.limit) {
      throw new ImageWriteError(
        `refusing to write ${length} bytes at ${offset}, outside the image's ${this.limit} bytes`,
      );
    }
  }

  /** Places `length` bytes at `offset`; `copy` fills part of a block from the source. */
  private async put(
    offset: number,
    length: number,
    copy: (block: Buffer, at: number, from: number, n: number) => void,
  ): Promise<void> {
    let done = 0;
    while (done < length) {
      if (this.failure) throw this.failure;
      const at = offset + done;
      if (this.runStart >= 0 && at === this.runStart + this.fill) {
        if (this.fill === 0) await this.inFlight[this.slot];
        const n = Math.min(BLOCK - this.fill, length - done);
        copy(this.blocks[this.slot]!, this.fill, done, n);
        this.fill += n;
        done += n;
        if (this.fill === BLOCK) this.submit(BLOCK, at + n);
        continue;
      }
      await this.endRun();
      if (at % ALIGN !== 0 || length - done < ALIGN) {
        // A piece of one 4 KiB block.
        const n = Math.min(ALIGN - (at % ALIGN), length - done);
        const scratch = Buffer.alloc(n);
        copy(scratch, 0, done, n);
        await this.partial(at, scratch);
        done += n;
        continue;
      }
      this.runStart = at;
      this.fill = 0;
    }
  }

  /** Starts writing the current block's first `length` bytes; the next run (if any) starts at `next`. */
  private submit(length: number, next: number): void {
    const block = this.blocks[this.slot]!;
    const position = this.runStart;
    const slot = this.slot;
    this.inFlight[slot] = this.pwrite(block, length, position).catch((err: Error) => {
      this.failure ??= err;
    });
    this.slot = (slot + 1) % DEPTH;
    this.runStart = next;
    this.fill = 0;
  }

  /** Ends the current run: its aligned part is written, a shorter tail is kept as a partial block. */
  private async endRun(): Promise<void> {
    if (this.runStart < 0) return;
    const start = this.runStart;
    const fill = this.fill;
    const aligned = fill - (fill % ALIGN);
    const tail = fill > aligned ? Buffer.from(this.blocks[this.slot]!.subarray(aligned, fill)) : null;
    if (aligned > 0) this.submit(aligned, -1);
    this.runStart = -1;
    this.fill = 0;
    if (tail) await this.partial(start + aligned, tail);
  }

  private async partial(at: number, bytes: Buffer): Promise<void> {
    const base = at - (at % ALIGN);
    let p = this.partials.get(base);
    if (!p) {
      p = { bytes: Buffer.alloc(ALIGN), spans: [], filled: 0 };
      this.partials.set(base, p);
    }
    bytes.copy(p.bytes, at - base);
    p.spans.push([at - base, at - base + bytes.length]);
    p.filled += bytes.length;
    if (p.filled < ALIGN) return;
    this.partials.delete(base);
    await this.singleWrite;
    if (this.failure) throw this.failure;
    p.bytes.copy(this.single);
    this.singleWrite = this.pwrite(this.single, ALIGN, base).catch((err: Error) => {
      this.failure ??= err;
    });
  }

  private async pwrite(block: Buffer, length: number, position: number): Promise<void> {
    try {
      await writeAll(this.fh, block, 0, length, position);
    } catch (err) {
      throw new ImageWriteError(
        `writing ${length} bytes to ${this.path} at byte ${position} failed: ${errorText(err)}`,
      );
    }
  }

  /** Writes what is still gathered and makes everything durable. */
  async finish(): Promise<void> {
    const { unzeroed, why } = await this.zeroing.finish();
    // Released meanwhile (a cancelled command): the shell was stopped, not refused.
    if (this.closed) throw new ImageWriteError(`the write to ${this.path} was stopped`);
    if (unzeroed.length > 0) {
      this.log.warn(
        { device: this.path, err: why, ranges: unzeroed.length },
        'the device would not zero a range itself; writing the zeros instead',
      );
    }
    for (const [start, length] of unzeroed) await this.put(start, length, fill);
    await this.endRun();
    await Promise.all([...this.inFlight, this.singleWrite]);
    if (this.failure) throw this.failure;
    if (this.partials.size > 0) {
      let fh: FileHandle | undefined;
      try {
        fh = await open(this.path, constants.O_RDWR);
        for (const [base, p] of this.partials) {
          for (const [s, e] of p.spans) await writeAll(fh, p.bytes, s, e - s, base + s);
        }
        await fh.datasync();
      } catch (err) {
        throw new ImageWriteError(`writing the last bytes of ${this.path} failed: ${errorText(err)}`);
      } finally {
        await fh?.close().catch(() => undefined);
      }
      this.partials.clear();
    }
    try {
      await this.fh.datasync();
    } catch (err) {
      throw new ImageWriteError(`syncing ${this.path} failed: ${errorText(err)}`);
    }
  }

  /** Waits for every write in flight and closes the device; idempotent. */
  release(): Promise<void> {
    // A second call waits for the first: a wipe after a failure must come after the last write landed.
    this.released ??= this.close();
    return this.released;
  }

  private async close(): Promise<void> {
    this.closed = true;
    await Promise.all([...this.inFlight, this.singleWrite, this.zeroing.stop()]);
    await this.fh.close().catch(() => undefined);
  }
}
