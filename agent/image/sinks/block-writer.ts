// The engine of the block-device and buffer-file sinks: bytes onto a device (or a file) at increasing offsets.
// Incoming chunks are copied into a small ring of large page-aligned blocks, and up to DEPTH block writes
// are in flight at once, because a disk given one request at a time idles between them. When every block
// is busy, the stream waits (back-pressure), so memory stays at DEPTH × BLOCK whatever the image size.
//
// Devices are written with O_DIRECT: through the page cache the final sync paid for most of a slower write
// (docs/performance.md); direct writes skip that copy and keep the disk busy from the first block. O_DIRECT wants
// page-aligned memory, which ordinary Buffers are not,
// hence WebAssembly memory (V8 maps it on page boundaries). Only a last piece shorter than a sector goes
// through the page cache. The image buffer file is written through the page cache, one block at a time
// (the ring still lets the download run ahead), and never synced.
import { constants } from 'node:fs';
import { open, type FileHandle } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { ImageWriteError, errorText } from '../../errors.ts';
import type { DeviceGuard } from '../../safety/device-guard.ts';
import { assertNotFreed, freeDownloaded } from '../downloaded-chunks.ts';
import type { HeldBack } from './held-back.ts';

const MiB = 1024 * 1024;
/** One write request: large enough for full-speed sequential I/O, no larger (docs/runtime.md, "Memory on Node 24"). */
const BLOCK = MiB / 2;
/** Writes in flight at once. */
const DEPTH = 4;
/** O_DIRECT lengths and offsets must be multiples of the logical sector size; 4 KiB covers every disk. */
const SECTOR_ALIGN = 4096;

// Node has the global, but this project's TypeScript libs (no DOM) do not declare it.
declare const WebAssembly: { Memory: new (descriptor: { initial: number }) => { buffer: ArrayBuffer } };

function alignedBlocks(): Buffer[] {
  const memory = new WebAssembly.Memory({ initial: (DEPTH * BLOCK) / 65536 });
  return Array.from({ length: DEPTH }, (_, i) => Buffer.from(memory.buffer, i * BLOCK, BLOCK));
}

interface Target {
  fh: FileHandle;
  path: string;
  /** A device: written with O_DIRECT and synced at the end. Otherwise the buffer file, neither. */
  direct: boolean;
}

export class BlockWriter extends Writable {
  private readonly inFlight: (Promise<void> | null)[] = new Array(DEPTH).fill(null);
  private current = 0;
  private fill = 0;
  /** Bytes accepted so far (written, in flight, or waiting in the current block). */
  private accepted = 0;
  private failure: Error | null = null;
  /** Set once destroyed: a write waiting for a free block must then not start. */
  private closing = false;
  /** The newest write; a file's next write waits for it. */
  private lastWrite: Promise<void> = Promise.resolve();

  /**
   * Opens `path` for an image: a device (checked against `guard`, written with O_DIRECT) or, with a null
   * guard, a plain file that is created or truncated. Bytes that land in `held`'s ranges are kept there
   * instead of written (the caller commits them last).
   */
  static async open(
    path: string,
    limit: number,
    guard: DeviceGuard | null,
    held: HeldBack | null = null,
  ): Promise<BlockWriter> {
    const blocks = alignedBlocks();
    if (guard) await guard.assertWritable(path, 'write an image to');
    try {
      const fh = guard ? await open(path, constants.O_RDWR | constants.O_DIRECT) : await open(path, 'w');
      return new BlockWriter({ fh, path, direct: !!guard }, blocks, limit, held);
    } catch (err) {
      throw new ImageWriteError(
        `cannot open ${path} for writing${guard ? ' with direct I/O (O_DIRECT)' : ''}: ${errorText(err)}`,
      );
    }
  }

  private readonly settled: Promise<void>;
  private markSettled!: () => void;

  private constructor(
    private readonly target: Target,
    private readonly blocks: Buffer[],
    /** Refuse to write past this many bytes (the device size, or what the buffer may take). */
    private readonly limit: number,
    private readonly held: HeldBack | null,
  ) {
    super({ highWaterMark: BLOCK });
    this.settled = new Promise((resolve) => (this.markSettled = resolve));
  }

  /** Bytes written to the target once the stream has finished. */
  get written(): number {
    return this.accepted;
  }

  get direct(): boolean {
    return this.target.direct;
  }

  /** Ends the writer, on success or failure: resolves once every write has settled and the file is closed. */
  async release(): Promise<void> {
    this.destroy();
    await this.settled;
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.accept(chunk).then(() => done(), done);
  }

  override _final(done: (err?: Error | null) => void): void {
    this.finish().then(() => done(), done);
  }

  override _destroy(err: Error | null, done: (err?: Error | null) => void): void {
    this.closing = true;
    const settle = async () => {
      // The slots' promises never reject: failures are kept in this.failure. Nothing new starts once
      // `closing` is set, so these are the last writes.
      await Promise.all(this.inFlight);
      await this.target.fh.close().catch(() => undefined);
    };
    void settle().then(() => {
      this.markSettled();
      done(err);
    });
  }

  private async accept(chunk: Buffer): Promise<void> {
    if (this.failure) throw this.failure;
    assertNotFreed(chunk, 'the block writer');
    if (this.accepted + chunk.length > this.limit) {
      throw new ImageWriteError(`the image is larger than the ${this.limit} bytes ${this.target.path} can hold`, {
        tooLarge: true,
      });
    }
    let at = 0;
    while (at < chunk.length) {
      if (this.fill === 0) await this.inFlight[this.current];
      if (this.failure) throw this.failure;
      if (this.closing) throw new ImageWriteError(`writing ${this.target.path} was abandoned`);
      const n = chunk.copy(this.blocks[this.current]!, this.fill, at);
      at += n;
      this.fill += n;
      this.accepted += n;
      if (this.fill === BLOCK) this.submit(BLOCK);
    }
    freeDownloaded(chunk);
  }

  /** Starts writing the current block's first `length` bytes and moves on to the next block. */
  private submit(length: number): void {
    const slot = this.current;
    const position = this.accepted - this.fill;
    const write = this.placement(this.blocks[slot]!.subarray(0, length), position);
    // A file gets one write at a time: writers to one file queue on its inode lock, and parallel ones
    // mostly spin there (docs/performance.md).
    const started = this.target.direct ? write() : this.lastWrite.then(write);
    this.lastWrite = this.inFlight[slot] = started.catch((err: Error) => {
      this.failure ??= err;
    });
    this.current = (slot + 1) % DEPTH;
    this.fill = 0;
  }

  /**
   * What writes `bytes` at `position`: all of it, or, where it touches the held-back ranges, only the part between
   * them (their edges are 4 KiB-aligned, so the part stays fit for O_DIRECT); the held part is copied now.
   */
  private placement(bytes: Buffer, position: number): () => Promise<void> {
    const held = this.held;
    if (!held || held.passes(position, bytes.length)) return () => this.writeAt(bytes, bytes.length, position);
    const [from, to] = held.take(position, bytes);
    return () => (to > from ? this.writeAt(bytes.subarray(from), to - from, position + from) : Promise.resolve());
  }

  private async writeAt(block: Buffer, length: number, position: number): Promise<void> {
    let done = 0;
    try {
      while (done < length) {
        const { bytesWritten } = await this.target.fh.write(block, done, length - done, position + done);
        if (bytesWritten === 0) throw new Error('no space left (the write made no progress)');
        // O_DIRECT cannot carry on from an unaligned offset: say what happened rather than fail with EINVAL.
        if (this.target.direct && bytesWritten < length - done && bytesWritten % SECTOR_ALIGN !== 0) {
          throw new Error(`the device took only ${bytesWritten} of ${length - done} bytes`);
        }
        done += bytesWritten;
      }
    } catch (err) {
      throw new ImageWriteError(`writing ${this.target.path} at byte ${position + done} failed: ${errorText(err)}`);
    }
  }

  private async finish(): Promise<void> {
    const tail = this.fill;
    const aligned = this.target.direct ? tail - (tail % SECTOR_ALIGN) : tail;
    const block = this.blocks[this.current]!;
    const position = this.accepted - tail;
    if (aligned > 0) this.submit(aligned);
    await Promise.all(this.inFlight);
    if (this.failure) throw this.failure;
    if (aligned < tail) {
      const piece = block.subarray(aligned, tail);
      const [from, to] = this.held ? this.held.take(position + aligned, piece) : [0, piece.length];
      if (to > from) await this.writeTail(piece.subarray(from, to), position + aligned + from);
    }
    if (!this.target.direct) return;
    try {
      await this.target.fh.datasync();
    } catch (err) {
      throw new ImageWriteError(`syncing ${this.target.path} failed: ${errorText(err)}`);
    }
  }

  /** A last piece shorter than a sector, which O_DIRECT cannot write: through the page cache, then synced. */
  private async writeTail(bytes: Buffer, position: number): Promise<void> {
    let fh: FileHandle | undefined;
    try {
      fh = await open(this.target.path, constants.O_RDWR);
      const { bytesWritten } = await fh.write(bytes, 0, bytes.length, position);
      if (bytesWritten !== bytes.length)
        throw new Error(`the device took only ${bytesWritten} of ${bytes.length} bytes`);
      await fh.datasync();
    } catch (err) {
      throw new ImageWriteError(`writing ${this.target.path} at byte ${position} failed: ${errorText(err)}`);
    } finally {
      await fh?.close().catch(() => undefined);
    }
  }
}
