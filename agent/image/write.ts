// Writing bytes to a block device (or the buffer file): large positional writes gathered from the
// incoming chunks, back-pressure through the Writable's high-water mark, fdatasync at the end. Also the
// steps around a stream write: clearing old signatures first, relocating the backup GPT and re-reading
// the partition table after.
import { open, type FileHandle } from 'node:fs/promises';
import { Writable } from 'node:stream';
import { ImageWriteError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { relocateBackupGpt } from './gpt.ts';
import type { Logger } from '../log.ts';
import type { DeviceGuard } from '../safety/device-guard.ts';

const MiB = 1024 * 1024;
/** Bytes gathered before one write syscall: big enough to keep a disk busy, small enough for RSS. */
const WRITE_BLOCK = 4 * MiB;
/**
 * A datasync starts in the background after this many new bytes, so the kernel writes back while more
 * data arrives instead of holding the whole image dirty until the final sync (dirty limits are a share of
 * RAM, often more than the image).
 */
const FLUSH_BEHIND = 32 * MiB;

/** The image does not fit its target; on the wire it is an ImageWriteError like any other write failure. */
export class TooLargeError extends ImageWriteError {
  constructor(details: string) {
    super(details);
    this.name = 'ImageWriteError';
  }
}

/** A Writable over a file handle that writes in large blocks at increasing offsets and syncs at the end. */
export class BlockWriter extends Writable {
  private pending: Buffer[] = [];
  private pendingBytes = 0;
  /** Bytes handed to the kernel so far. */
  written = 0;
  private syncedUpTo = 0;
  private syncing: Promise<void> | null = null;
  private syncError: Error | null = null;

  constructor(
    private readonly fh: FileHandle,
    private readonly target: string,
    /** Refuse to write past this many bytes (the device size, or what the buffer may take). */
    private readonly limit: number,
    /** Whether the data must be durable at the end (a device) or not (the temporary buffer file). */
    private readonly durable = true,
  ) {
    super({ highWaterMark: 2 * WRITE_BLOCK });
  }

  override _write(chunk: Buffer, _enc: BufferEncoding, done: (err?: Error | null) => void): void {
    this.pending.push(chunk);
    this.pendingBytes += chunk.length;
    if (this.pendingBytes < WRITE_BLOCK) return done();
    this.flush().then(() => done(), done);
  }

  override _final(done: (err?: Error | null) => void): void {
    this.flush()
      .then(() => this.syncing)
      .then(() => {
        if (this.syncError) throw this.syncError;
        return this.durable ? this.fh.datasync() : undefined;
      })
      .then(() => done(), (err: Error) => done(err instanceof ImageWriteError ? err : new ImageWriteError(`syncing ${this.target} failed: ${errorText(err)}`)));
  }

  private async flush(): Promise<void> {
    if (this.pendingBytes === 0) return;
    if (this.written + this.pendingBytes > this.limit) {
      throw new TooLargeError(`the image is larger than the ${this.limit} bytes ${this.target} can hold`);
    }
    let buffers = this.pending;
    let left = this.pendingBytes;
    this.pending = [];
    this.pendingBytes = 0;
    while (left > 0) {
      let n: number;
      try {
        ({ bytesWritten: n } = await this.fh.writev(buffers, this.written));
      } catch (err) {
        throw new ImageWriteError(`writing ${this.target} at byte ${this.written} failed: ${errorText(err)}`);
      }
      this.written += n;
      left -= n;
      if (left > 0) buffers = dropBytes(buffers, n);
    }
    this.flushBehind();
  }

  private flushBehind(): void {
    if (!this.durable || this.syncing || this.written - this.syncedUpTo < FLUSH_BEHIND) return;
    const upTo = this.written;
    this.syncing = this.fh.datasync().then(
      () => {
        this.syncedUpTo = upTo;
        this.syncing = null;
      },
      (err: Error) => {
        this.syncError = new ImageWriteError(`syncing ${this.target} failed: ${errorText(err)}`);
        this.syncing = null;
      },
    );
  }
}

function dropBytes(buffers: Buffer[], n: number): Buffer[] {
  const out: Buffer[] = [];
  for (const b of buffers) {
    if (n >= b.length) {
      n -= b.length;
      continue;
    }
    out.push(n > 0 ? b.subarray(n) : b);
    n = 0;
  }
  return out;
}

export async function openForWrite(path: string, guard: DeviceGuard | null): Promise<FileHandle> {
  if (guard) await guard.assertWritable(path, 'write an image to');
  try {
    return await open(path, guard ? 'r+' : 'w');
  } catch (err) {
    throw new ImageWriteError(`cannot open ${path} for writing: ${errorText(err)}`);
  }
}

/**
 * Clears partition-table and filesystem signatures, and zeroes the first and last MiB, so that nothing of
 * an older, larger layout (a backup GPT at the disk's end, RAID or LVM labels) survives the new image.
 */
export async function clearSignatures(device: string, sizeBytes: number, guard: DeviceGuard, log: Logger): Promise<void> {
  await guard.assertWritable(device, 'clear the signatures of');
  await run('wipefs', ['--all', '--force', device], { log });
  const fh = await openForWrite(device, guard);
  try {
    const zeros = Buffer.alloc(Math.min(MiB, sizeBytes));
    await fh.write(zeros, 0, zeros.length, 0);
    await fh.write(zeros, 0, zeros.length, sizeBytes - zeros.length);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/**
 * After a raw write: when the image has a GPT, move its backup to the real end of the disk (computed from
 * the image's head; `sgdisk -e` when the head does not hold the whole table), then re-read the table.
 */
export async function settlePartitionTable(
  device: { path: string; size: number; logicalSectorSize: number },
  head: Buffer,
  guard: DeviceGuard,
  log: Logger,
): Promise<void> {
  if (headHasGpt(head)) {
    await guard.assertWritable(device.path, 'relocate the backup GPT on');
    const writes = relocateBackupGpt(head, device.logicalSectorSize, device.size);
    if (writes) {
      const fh = await openForWrite(device.path, guard);
      try {
        for (const w of writes) await fh.write(w.data, 0, w.data.length, w.offset);
        await fh.datasync();
      } finally {
        await fh.close();
      }
    } else {
      await run('sgdisk', ['-e', device.path], { log }).catch((err) => log.warn({ device: device.path, err: errorText(err) }, 'sgdisk -e failed'));
    }
  }
  await rereadPartitions(device.path, log);
}

export async function rereadPartitions(device: string, log: Logger): Promise<void> {
  try {
    await run('blockdev', ['--rereadpt', device], { log });
  } catch {
    await run('partprobe', [device], { log }).catch((err) => log.warn({ device, err: errorText(err) }, 'partprobe failed'));
  }
}

/** Whether a disk image's head holds a GPT header (at LBA 1 for 512-byte or 4 KiB sectors). */
export function headHasGpt(head: Buffer): boolean {
  return [512, 4096].some((at) => head.subarray(at, at + 8).toString('latin1') === 'EFI PART');
}
