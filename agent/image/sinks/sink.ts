// The one interface every destination of an image implements: the block writer (raw bytes onto a device or
// the buffer file), the decoder pipe (`pigz|zstd|xz -dc | dd` onto a device), the buffer file's decoder
// and qemu-img (an inspected buffer file onto a device); the streamed qcow2 writer joins them.
// The data path composes source → sniff → tap → gate → sink (docs/architecture.md); the sink is the only
// stage that touches the target.

/** The device (or file) a sink writes. */
export interface SinkTarget {
  path: string;
  /** Bytes the target can hold: the device size, or what the buffer directory may take. */
  size: number;
  /** 512 or 4096; 512 for a file. */
  logicalSectorSize: number;
  /**
   * Refusals the caller can judge from the image before the device changes (image/prepare.ts: the config
   * drive's room); throws an IPA wire error. Called once per attempt with the image as it will be on the device.
   */
  precheck?: (image: ImageView) => Promise<void>;
  /** How many leading bytes of a streamed image the precheck wants to see (default: the inspected head). */
  precheckHeadBytes?: number;
}

/** The image as it will be on the device: its first bytes always, any bytes when the whole image is at hand. */
export interface ImageView {
  head: Buffer;
  /** Bytes from `offset` (fewer past the image's end), or null where they cannot be read. */
  read?: (offset: number, length: number) => Promise<Buffer | null>;
  /**
   * Only a prefix of the image is at hand (a stream): a check that needs more may throw needsBuffer, and the
   * image goes the buffered way, where all of it is.
   */
  partial?: boolean;
  /** The download's declared length, where a stream has one (what the buffered way would have to hold). */
  totalBytes?: number;
}

/** What the gate knows when it hands the head over. */
export interface HeadFacts {
  /** The download's length as the server declared it (the compressed length for a compressed image). */
  totalBytes?: number;
  /** What the sniff stage found; `none` for plain bytes. */
  compression: 'gzip' | 'zstd' | 'xz' | 'none';
}

/** What a finished sink wrote. */
export interface SinkResult {
  /** Bytes of image now on the target (decoded bytes for a decoding sink, the virtual size for qemu-img). */
  bytes: number;
  /** The first bytes of the image as they are now on the target, for the partition-table step after. */
  head: Buffer;
}

/**
 * Contract, in the order the pipeline calls it (one sink serves exactly one attempt):
 *
 *   checkHead(head) ─▶ write(chunks) ─▶ finish() ─▶ commit()     and always, last: release(); after a failure: wipe()
 *
 * Ordering a sink may rely on:
 * - `checkHead` is called once, before `write`, with the first `headBytes` bytes of the *image* (decoded when
 *   the download was compressed; fewer when the image is shorter). Nothing reaches the target before it
 *   resolves. It may refuse by throwing an IPA wire error (InvalidImage, ImageWriteError); `write` then never
 *   runs. A sink that must prepare its target (clear old signatures) does so here.
 * - `write` is called at most once, with the sink's input in byte order, each byte exactly once, no gaps:
 *   plain image bytes for most sinks, the compressed bytes for a decoding sink (qemu-img, which reads a file
 *   itself, takes the inspected buffer file as its `Input` instead of chunks). A resumed download is spliced
 *   before it reaches the sink, so a sink never sees a resume. `write` resolves when every chunk is accepted.
 *   A sink that copies a chunk may free it then (image/downloaded-chunks.ts): the stages before it pass on
 *   chunks they do not keep, and copies of those they do.
 * - `finish` is called only after `write` resolved; it resolves once the bytes are durable on the target, all but
 *   the held-back ones: a device sink keeps the image's bytes that land in the device's first and last MiB in
 *   memory (held-back.ts), so that a process killed before `commit` (SIGKILL, the OOM killer) leaves a disk with
 *   no partition table. `finish`'s result already carries the image's head, from memory.
 * - `commit` is called only after `finish` resolved and the caller verified the image (its checksum); it writes
 *   the held-back bytes and flushes the device. From then on the disk holds the new table. A file sink has
 *   nothing to commit.
 * - `release` is called exactly once per opened sink, after success or failure, and is idempotent: it stops
 *   every writer and child process and resolves only when none of them can still change the target.
 *
 * Retries: a sink never retries and never sleeps. It throws, with the facts a retry needs as fields of the
 * error (`restartable`, `tooLarge`, `transient`; image/transfer.ts owns every retry decision); a fresh attempt
 * opens a fresh sink.
 *
 * `wipe` is called after `release`, only for a failed attempt whose `checkHead` resolved (the target may have
 * been touched). It guarantees that nothing the failed attempt left can boot or be mistaken for a deployed
 * image: on a device, partition-table and filesystem signatures are gone and the first and last MiB are
 * zeroed; on a buffer file, the file is removed. It throws if it cannot; the caller logs that and reports the
 * attempt's own error.
 */
export interface Sink<Input = AsyncIterable<Buffer>> {
  /** For logs: `block writer`, `decoder pipe`, `buffer file`, `qemu-img`, … */
  readonly name: string;
  /** How many leading image bytes `checkHead` wants to see (0: none, it is called with an empty head). */
  readonly headBytes: number;
  checkHead(head: Buffer, facts: HeadFacts): Promise<void>;
  write(input: Input): Promise<void>;
  finish(): Promise<SinkResult>;
  commit(): Promise<void>;
  release(): Promise<void>;
  wipe(): Promise<void>;
}
