// The sink for images that cannot be streamed: the buffer file in `ipa-image-buffer-dir` (RAM-backed tmpfs
// in the ramdisk), inspected whole once it is complete. Plain downloads go through the block writer, a
// compressed one through its decoder straight into the file (file-decoder.ts).
import { rm, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { ImageDownloadOutofSpaceError, ImageWriteError } from '../../errors.ts';
import type { Compression } from '../sniff.ts';
import { BlockWriter } from './block-writer.ts';
import { decodeToFile } from './file-decoder.ts';
import type { Sink, SinkResult } from './sink.ts';

export class BufferFileSink implements Sink {
  readonly name = 'buffer file';
  /** The whole file is inspected once complete; nothing to see at the head. */
  readonly headBytes = 0;
  private writer: BlockWriter | null = null;

  constructor(
    readonly file: string,
    /** Bytes the file may grow to (bufferBudget). */
    private readonly limit: number,
    private readonly compression: Compression,
    /** The buffer directory, for the error message. */
    private readonly dir: string,
  ) {}

  async checkHead(): Promise<void> {}

  async write(chunks: AsyncIterable<Buffer>): Promise<void> {
    try {
      if (this.compression !== 'none') {
        await decodeToFile(this.compression, chunks, this.file, this.limit);
        return;
      }
      this.writer = await BlockWriter.open(this.file, this.limit, null);
      await pipeline(chunks, this.writer);
    } catch (err) {
      if (err instanceof ImageWriteError && err.tooLarge) {
        // The cause says whether it was the download or, for a compressed image, what it decoded to.
        throw new ImageDownloadOutofSpaceError(
          `the image does not fit in the buffer directory ${this.dir}: ${err.details}`,
        );
      }
      throw err;
    }
  }

  /** A file holds no partition table anyone boots from: nothing is held back. */
  async commit(): Promise<void> {}

  async finish(): Promise<SinkResult> {
    return { bytes: (await stat(this.file)).size, head: Buffer.alloc(0) };
  }

  async release(): Promise<void> {
    // decodeToFile stops its decoder before it returns or throws; the writer is the one thing left.
    await this.writer?.release();
  }

  wipe(): Promise<void> {
    return rm(this.file, { force: true });
  }
}
