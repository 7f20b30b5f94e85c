// The deploy data path, in one place. Stream path (raw images with stream_raw_images):
//   download ─▶ hash + count ─▶ plain: head gate ─▶ device
//                            └▶ gzip, zstd or xz: decoded-head gate ─▶ `pigz|zstd|xz -dc | dd` ─▶ device
// Buffered path (everything else):
//   download ─▶ count ─▶ plain: buffer file ─▶ inspect ─▶ qemu-img / copy ─▶ device
//                    │                  └▶ hash ─▶ verify
//                    └▶ gzip, zstd or xz: hash ─▶ `pigz|zstd|xz -dc > buffer file` ─▶ inspect ─▶ …
// The hash covers the downloaded bytes and runs on a worker thread (hash-worker.ts), the disk writes run
// in libuv's pool with several in flight (block-writer.ts), so the main thread only moves bytes and the
// three overlap. Decoded output skips the agent altogether (device-decoder.ts, file-decoder.ts). A broken
// download resumes inside fetch.ts where the server allows it; otherwise the whole attempt is retried from
// byte zero.
import { createReadStream } from 'node:fs';
import { open, rm, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import type { AgentServices } from '../commands/types.ts';
import { ImageChecksumError, ImageDownloadError, InvalidImage, errorText } from '../errors.ts';
import { bufferBudget, bufferPath, ImageDownloadOutofSpaceError } from './buffer.ts';
import { ChecksumMismatch, expectedDigest, imageFileNames, parseChecksumFile, verifyDigest, type ExpectedDigest } from './checksum.ts';
import { convertToDevice } from './convert.ts';
import { HashWorker } from './hash-worker.ts';
import { sniffCompression, type Compression } from './decompress.ts';
import { decodeToFile } from './file-decoder.ts';
import { decodedHeadGate, DeviceDecoder } from './device-decoder.ts';
import { Dispatchers } from './dispatchers.ts';
import { ImageDownloadFatalError, ImageFetcher, RetriesSpentError, type OpenedImage } from './fetch.ts';
import type { ImageInfo } from './image-info.ts';
import { shownUrl } from './url-credentials.ts';
import { INSPECT_HEAD_BYTES, inspectImage, type ImageInspection } from './inspect.ts';
import { readAtLeast, rest } from './peek.ts';
import type { ProgressMeter } from '../progress.ts';
import { BlockWriter, TooLargeError } from './block-writer.ts';
import { clearSignatures, flushDevice, settlePartitionTable } from './write.ts';

export interface TargetDevice {
  path: string;
  size: number;
  logicalSectorSize: number;
}

export interface PipelineJob {
  services: Pick<AgentServices, 'config' | 'log' | 'guard'>;
  info: ImageInfo;
  device: TargetDevice;
  meter: ProgressMeter;
  /** The command's cancellation: every transfer and tool stops, and the disk is cleared as after a failure. */
  signal?: AbortSignal;
}

/**
 * Errors a fresh attempt from byte zero may fix: broken transfers that did not already use up their retries,
 * and a checksum mismatch whose digest is new (bytes damaged on the way). The same wrong digest twice means the
 * server serves exactly those bytes; IPA downloads again on every mismatch, as many times as it has retries.
 */
function retryable(err: unknown, wrongDigests: Set<string>): boolean {
  if (err instanceof ChecksumMismatch) {
    const fresh = !wrongDigests.has(err.actual);
    wrongDigests.add(err.actual);
    return fresh;
  }
  return (
    err instanceof ImageDownloadError &&
    !(err instanceof ImageDownloadFatalError) &&
    !(err instanceof RetriesSpentError) &&
    !(err instanceof ImageDownloadOutofSpaceError)
  );
}

/** Downloads, verifies and writes the image onto the device; returns how it went there. */
export async function writeImage(job: PipelineJob): Promise<{ path: 'stream' | 'buffer'; bytes: number }> {
  const { config, log } = job.services;
  const dispatchers = new Dispatchers({
    connectTimeoutMs: config.image.connectTimeoutS * 1000,
    stallTimeoutMs: config.image.connectTimeoutS * 1000,
    insecure: config.tls.insecure,
    caFile: config.tls.caFile,
    minTlsVersion: config.tls.minVersion,
    proxies: job.info.proxies,
    noProxy: job.info.noProxy,
  });
  const fetcher = new ImageFetcher(dispatchers, {
    retries: config.image.retries,
    retryIntervalMs: config.image.retryIntervalS * 1000,
    deadline: config.image.maxDurationS > 0 ? Date.now() + config.image.maxDurationS * 1000 : 0,
    authorization: job.info.authorization,
    log,
    cancel: job.signal,
  });
  const stream = job.info.streamRaw && job.info.diskFormat === 'raw';
  try {
    if (job.info.checksum.isUrl) job.meter.start('checksum', null);
    const expected = await expectedChecksum(job.info, fetcher, config.image.md5Enabled);
    const wrongDigests = new Set<string>();
    for (let attempt = 0; ; attempt++) {
      try {
        const bytes = stream ? await streamOnce(job, fetcher, expected) : await bufferOnce(job, fetcher, expected);
        return { path: stream ? 'stream' : 'buffer', bytes };
      } catch (err) {
        if (job.signal?.aborted || !retryable(err, wrongDigests) || attempt >= config.image.retries) throw err;
        log.warn({ attempt, err: errorText(err) }, 'image transfer failed, starting again from byte zero');
        await sleep(config.image.retryIntervalS * 1000, undefined, { signal: job.signal });
      }
    }
  } finally {
    await dispatchers.close();
  }
}

async function expectedChecksum(info: ImageInfo, fetcher: ImageFetcher, md5Enabled: boolean): Promise<ExpectedDigest> {
  let digest = info.checksum.value;
  if (info.checksum.isUrl) {
    const text = await fetcher.text(digest, 'Checksum file download');
    digest = parseChecksumFile(text, imageFileNames(info.urls), shownUrl(digest));
  }
  return expectedDigest(info.checksum.algo, digest, md5Enabled);
}

/** A pipeline's options: a cancelled command destroys every stage, which stops its tools and writers. */
function cancelOption(job: PipelineJob): { signal?: AbortSignal } {
  return job.signal ? { signal: job.signal } : {};
}

/** Runs `body` with a hashing thread that is stopped afterwards, however `body` ends. */
async function withHashWorker<T>(algo: string, body: (hash: HashWorker) => Promise<T>): Promise<T> {
  const hash = new HashWorker(algo);
  try {
    return await body(hash);
  } finally {
    await hash.close();
  }
}

/** Counts the downloaded bytes as they pass, and hashes them unless that is done later (null). */
function tap(hash: HashWorker | null, meter: ProgressMeter) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of source) {
      if (hash) await hash.update(chunk);
      meter.add(chunk.length);
      yield chunk;
    }
  };
}

/** Collects the first `bytes` of a stream, hands them to `check` (which may refuse), then passes everything on. */
function headGate(bytes: number, check: (head: Buffer) => Promise<void>) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const it = source[Symbol.asyncIterator]();
    const head = await readAtLeast(it, bytes);
    await check(head);
    if (head.length > 0) yield head;
    yield* rest(it);
  };
}

function refuseUnsafe(found: ImageInspection, declared: string | undefined, permitted: readonly string[], deep: boolean): void {
  if (found.unsafe.length > 0) throw new InvalidImage(`Security: Image failed safety check: ${found.unsafe.join('; ')}`);
  if (!deep) return;
  if (declared && declared !== 'unknown' && declared !== found.format) {
    throw new InvalidImage(`Security: Expected format was ${declared}, but image was actually ${found.format}`);
  }
  if (!permitted.includes(found.format)) {
    throw new InvalidImage(`Security: Detected image format was ${found.format}, but only ${permitted.join(', ')} are allowed`);
  }
}

/** After a failed write: clears what was written so that a half image cannot boot; a failure here is logged. */
async function wipeAfterFailure(device: TargetDevice, job: PipelineJob): Promise<void> {
  const { guard, log } = job.services;
  await clearSignatures(device.path, device.size, guard, log).catch((err) =>
    log.warn({ device: device.path, err: errorText(err) }, 'could not clear a partly written image'),
  );
}

async function streamOnce(job: PipelineJob, fetcher: ImageFetcher, expected: ExpectedDigest): Promise<number> {
  const { info, device, meter } = job;
  const { guard, log } = job.services;
  let sink = null as BlockWriter | DeviceDecoder | null;
  let compression: Compression = 'none';
  let written: Buffer = Buffer.alloc(0);
  let bytes = 0;
  let touched = false;
  let url = shownUrl(info.urls[0]!);
  try {
    // The phase includes the request, so that its logged duration is the whole transfer.
    meter.start('stream', null);
    const image = await fetcher.open(info.urls);
    url = image.url;
    meter.setTotal(image.totalBytes ?? null);
    const checkHead = async (head: Buffer) => {
      // Raw images are copied byte for byte and never given to qemu-img, so a container format that
      // claims to be raw is refused here rather than written.
      const found = inspectImage(head);
      if (found.format !== 'raw') refuseUnsafe(found, 'raw', ['raw'], true);
      if (compression === 'none' && image.totalBytes !== undefined && image.totalBytes > device.size) {
        throw new TooLargeError(`the image (${image.totalBytes} bytes) is larger than ${device.path} (${device.size} bytes)`);
      }
      written = head;
      touched = true;
      await clearSignatures(device.path, device.size, guard, log);
    };
    const digest = await withHashWorker(expected.algo, async (hash) => {
      await pipeline(image.body, tap(hash, meter), async (downloaded: AsyncIterable<Buffer>) => {
        const sniffed = await sniffCompression(downloaded);
        compression = sniffed.kind;
        if (sniffed.kind !== 'none') {
          const decoder = (sink = await DeviceDecoder.start(sniffed.kind, device.path, guard));
          bytes = await decoder.write(decodedHeadGate(sniffed.kind, INSPECT_HEAD_BYTES, checkHead)(sniffed.chunks));
        } else {
          const writer = (sink = await BlockWriter.open(device.path, device.size, guard));
          await pipeline(sniffed.chunks, headGate(INSPECT_HEAD_BYTES, checkHead), writer);
          bytes = writer.written;
        }
      }, cancelOption(job));
      return hash.digest();
    });
    verifyDigest(expected, digest, info.id, url);
  } catch (err) {
    // Whatever reached the disk is unverified: once the last write landed, leave nothing that looks bootable.
    await sink?.release();
    if (touched) await wipeAfterFailure(device, job);
    throw err;
  } finally {
    await sink?.release();
  }
  log.info({ bytes, compression, device: device.path, checksum: expected.algo }, 'image streamed and verified');
  meter.start('table', null);
  await settlePartitionTable(device, written, guard, log);
  return bytes;
}

/**
 * Fills the buffer file. A compressed download is hashed as it passes (the file holds other bytes), and
 * its digest is returned; a plain download is the file itself, so it is hashed from there later (null).
 */
async function downloadToBuffer(job: PipelineJob, image: OpenedImage, file: string, hash: HashWorker, limit: number): Promise<string | null> {
  try {
    const compression = await pipeline(image.body, async (downloaded: AsyncIterable<Buffer>): Promise<Compression> => {
      const sniffed = await sniffCompression(downloaded);
      if (sniffed.kind !== 'none') {
        await decodeToFile(sniffed.kind, tap(hash, job.meter)(sniffed.chunks), file, limit);
        return sniffed.kind;
      }
      const writer = await BlockWriter.open(file, limit, null);
      try {
        await pipeline(sniffed.chunks, tap(null, job.meter), writer);
      } finally {
        await writer.release();
      }
      return 'none';
    }, cancelOption(job));
    return compression === 'none' ? null : await hash.digest();
  } catch (err) {
    if (err instanceof TooLargeError) {
      // The cause says whether it was the download or, for a compressed image, what it decoded to.
      throw new ImageDownloadOutofSpaceError(`the image does not fit in the buffer directory ${job.services.config.image.bufferDir}: ${err.details}`);
    }
    throw err;
  }
}

async function readEnds(file: string, size: number): Promise<{ head: Buffer; tail: Buffer }> {
  const fh = await open(file, 'r');
  try {
    const head = Buffer.alloc(Math.min(size, INSPECT_HEAD_BYTES));
    await fh.read(head, 0, head.length, 0);
    const tail = Buffer.alloc(Math.min(size, 512));
    await fh.read(tail, 0, tail.length, size - tail.length);
    return { head, tail };
  } finally {
    await fh.close();
  }
}

/** Reads the image's header and footer, and refuses it unless it is an allowed format that fits the device. */
async function inspectBuffer(job: PipelineJob, file: string): Promise<{ format: string; virtualSize: number; head: Buffer }> {
  const { info, device } = job;
  const { config } = job.services;
  const size = (await stat(file)).size;
  const { head, tail } = await readEnds(file, size);
  const found = inspectImage(head, tail);
  refuseUnsafe(found, info.diskFormat, config.image.permittedFormats, !config.image.disableDeepInspection);
  const virtualSize = found.format === 'raw' ? size : found.virtualSize;
  if (virtualSize === undefined) throw new InvalidImage(`Security: the ${found.format} header does not state a virtual size`);
  if (virtualSize > device.size) {
    throw new TooLargeError(`the image's virtual size (${virtualSize} bytes) is larger than ${device.path} (${device.size} bytes)`);
  }
  return { format: found.format, virtualSize, head };
}

/**
 * The checksum of a buffered image. One that came compressed was hashed on the way in and is checked at once.
 * A plain one is hashed from the buffer file while inspection and the device write go on: on a 2-core machine
 * the hash then does not compete with the download for CPU, and on a fast link it cannot be the download's
 * bottleneck. Only inspected bytes reach qemu-img either way; a tenant's own hostile image would arrive with a
 * valid checksum, so the inspection, not the checksum, is what guards it.
 */
function bufferChecksum(job: PipelineJob, hash: HashWorker, file: string, inline: string | null, expected: ExpectedDigest, url: string) {
  if (inline !== null) verifyDigest(expected, inline, job.info.id, url);
  const checked = inline === null ? hash.digestOfFile(file).then((digest) => verifyDigest(expected, digest, job.info.id, url)) : null;
  // Nobody waits for it when the disk cannot even be prepared; its failure must not go unhandled then.
  checked?.catch(() => undefined);
  let waited = false;
  return {
    /** Waits for the file's checksum, as a phase of its own the first time. */
    async verify(): Promise<void> {
      if (!checked) return;
      if (!waited) job.meter.start('verify', null);
      waited = true;
      await checked;
    },
    /** The error to report for a failure that damaged bytes may have caused: their checksum mismatch, if any. */
    async explain(err: unknown): Promise<unknown> {
      if (!checked || err instanceof ImageChecksumError) return err;
      return checked.then(
        () => err,
        (mismatch: unknown) => (mismatch instanceof ImageChecksumError ? mismatch : err),
      );
    },
  };
}

async function bufferOnce(job: PipelineJob, fetcher: ImageFetcher, expected: ExpectedDigest): Promise<number> {
  const { info, device, meter } = job;
  const { config, guard, log } = job.services;
  meter.start('download', null);
  const image = await fetcher.open(info.urls);
  let budget;
  try {
    budget = await bufferBudget(config.image.bufferDir, image.totalBytes);
  } catch (err) {
    image.cancel();
    throw err;
  }
  const file = bufferPath(config.image.bufferDir, info.id);
  try {
    meter.setTotal(image.totalBytes ?? null);
    return await withHashWorker(expected.algo, async (hash) => {
      const inline = await downloadToBuffer(job, image, file, hash, budget.limit);
      const checksum = bufferChecksum(job, hash, file, inline, expected, image.url);
      meter.start('inspect', null);
      const found = await inspectBuffer(job, file).catch(async (err: unknown) => {
        throw await checksum.explain(err);
      });
      job.signal?.throwIfAborted();
      await clearSignatures(device.path, device.size, guard, log);
      try {
        const head = found.format === 'raw'
          ? await copyFileToDevice(file, found, device, job)
          : await convertFileToDevice(file, found, device, job);
        await checksum.verify();
        meter.start('table', null);
        await settlePartitionTable(device, head, guard, log);
      } catch (err) {
        await wipeAfterFailure(device, job);
        throw await checksum.explain(err);
      }
      return found.virtualSize;
    });
  } finally {
    await rm(file, { force: true });
  }
}

type InspectedBuffer = Awaited<ReturnType<typeof inspectBuffer>>;

/** Copies a raw buffer onto the device; returns its first bytes, as now on the device. */
async function copyFileToDevice(file: string, found: InspectedBuffer, device: TargetDevice, job: PipelineJob): Promise<Buffer> {
  job.meter.start('write', found.virtualSize);
  const writer = await BlockWriter.open(device.path, device.size, job.services.guard);
  try {
    await pipeline(
      createReadStream(file, { highWaterMark: 8 * 1024 * 1024 }),
      async function* (source: AsyncIterable<Buffer>) {
        for await (const chunk of source) {
          job.meter.add(chunk.length);
          yield chunk;
        }
      },
      writer,
      cancelOption(job),
    );
  } finally {
    await writer.release();
  }
  return found.head;
}

/** Converts an image onto the device with qemu-img; returns the device's first bytes. */
async function convertFileToDevice(file: string, found: InspectedBuffer, device: TargetDevice, job: PipelineJob): Promise<Buffer> {
  const { config, guard, log } = job.services;
  const { virtualSize } = found;
  job.meter.start('convert', virtualSize);
  await convertToDevice({
    file,
    format: found.format,
    device: device.path,
    memoryLimitMiB: config.image.convertMemoryLimitMiB,
    guard,
    log,
    signal: job.signal,
    onPercent: (p) => job.meter.set(Math.round((virtualSize * p) / 100)),
  });
  await flushDevice(device.path, guard);
  return (await readEnds(device.path, INSPECT_HEAD_BYTES)).head;
}
