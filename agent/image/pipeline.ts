// The deploy data path as one composition (docs/architecture.md):
//
//   source ─▶ sniff ─▶ tap ─▶ gate ─▶ sink
//
// source: transfer.ts's body (resumed across breaks, content-decoded); sniff: the compression, from the first
// bytes; tap: counts for progress and hashes on libuv's thread pool (the hash addon, image-hash.ts); gate: nothing passes before the image's head
// was accepted; sink: the one stage that touches the target (sinks/sink.ts). ROUTES says which sink takes a
// download and when the tap hashes. A buffered image then takes a second leg, buffer file ─▶ device sink.
// transfer.ts owns every retry: an attempt here runs once and throws.
import { createReadStream } from 'node:fs';
import { ImageWriteError, errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { ProgressMeter } from '../progress.ts';
import type { AgentServices } from '../services.ts';
import { bufferBudget, bufferPath, cleanStaleBuffers, discardBuffer } from './buffer.ts';
import { bufferChecksum, inspectBuffer, type InspectedBuffer } from './buffer-check.ts';
import { expectedDigest, imageFileNames, parseChecksumFile, verifyDigest, type ExpectedDigest } from './checksum.ts';
import { Dispatchers } from './dispatchers.ts';
import { gateFor } from './gates.ts';
import { ImageHash } from './image-hash.ts';
import type { ImageInfo } from './image-info.ts';
import { BlockDeviceSink } from './sinks/block-device.ts';
import { BufferFileSink } from './sinks/buffer-file.ts';
import { DecoderPipe } from './sinks/decoder-pipe.ts';
import { DeviceTarget } from './sinks/device-target.ts';
import { WriteJournal, journalPath } from './sinks/write-journal.ts';
import { QemuImgSink } from './sinks/qemu-img.ts';
import { Qcow2Sink, streamsQcow2 } from './sinks/qcow2.ts';
import type { HeadFacts, Sink, SinkResult, SinkTarget } from './sinks/sink.ts';
import { sniffCompression, type Compression } from './sniff.ts';
import { Transfer, type OpenedImage } from './transfer.ts';
import { shownUrl } from './url-credentials.ts';
import { settlePartitionTable } from './settle.ts';

export interface PipelineJob {
  services: Pick<AgentServices, 'config' | 'log' | 'guard' | 'clock'>;
  info: ImageInfo;
  device: SinkTarget;
  meter: ProgressMeter;
  /** The command's cancellation: every transfer and tool stops, and the disk is cleared as after a failure. */
  signal?: AbortSignal;
}

interface Leg {
  job: PipelineJob;
  target: DeviceTarget;
  /** The buffer file and what it may take (buffered path only). */
  buffer?: { file: string; limit: number };
}

interface Route {
  /** The progress phase the download runs in. */
  phase: 'stream' | 'download';
  /** Whether the tap hashes a download in this compression (no: the buffer file is hashed later). */
  hashInline(kind: Compression): boolean;
  sink(kind: Compression, leg: Leg): Promise<Sink> | Sink;
}

const ROUTES: Record<'stream' | 'qcow2' | 'buffer', Route> = {
  stream: {
    phase: 'stream',
    hashInline: () => true,
    sink: (kind, { target }) =>
      kind === 'none' ? BlockDeviceSink.open(target, { inspected: false }) : DecoderPipe.start(kind, target),
  },
  // qcow2, plain or packed, through the streaming reader; what it cannot take goes the buffered route.
  qcow2: {
    phase: 'stream',
    hashInline: () => true,
    sink: (kind, { job, target }) => Qcow2Sink.open(kind, target, job.info.diskFormat, job.services.config.image),
  },
  buffer: {
    phase: 'download',
    hashInline: (kind) => kind !== 'none',
    sink: (kind, { job, buffer }) =>
      new BufferFileSink(buffer!.file, buffer!.limit, kind, job.services.config.image.bufferDir),
  },
};

/** Downloads, verifies and writes the image onto the device; returns how it went there. */
export async function writeImage(job: PipelineJob): Promise<{ path: keyof typeof ROUTES; bytes: number }> {
  const { config, log, clock } = job.services;
  const dispatchers = new Dispatchers({
    connectTimeoutMs: config.image.connectTimeoutS * 1000,
    stallTimeoutMs: config.image.connectTimeoutS * 1000,
    insecure: config.tls.insecure,
    caFile: config.tls.caFile,
    minTlsVersion: config.tls.minVersion,
    proxies: job.info.proxies,
    noProxy: job.info.noProxy,
  });
  const transfer = new Transfer(dispatchers, {
    retries: config.image.retries,
    retryIntervalMs: config.image.retryIntervalS * 1000,
    maxDurationMs: config.image.maxDurationS * 1000,
    authorization: job.info.authorization,
    log,
    clock,
    cancel: job.signal,
  });
  let path: keyof typeof ROUTES =
    job.info.streamRaw && job.info.diskFormat === 'raw'
      ? 'stream'
      : streamsQcow2(job.info, config.image)
        ? 'qcow2'
        : 'buffer';
  try {
    if (job.info.checksum.isUrl) job.meter.start('checksum', null);
    const expected = await expectedChecksum(job.info, transfer, config.image.md5Enabled);
    const bytes = await transfer.run(async () => {
      if (path === 'buffer') return bufferOnce(job, transfer, expected);
      try {
        return await streamOnce(job, transfer, expected, ROUTES[path]);
      } catch (err) {
        if (!(err instanceof ImageWriteError && err.needsBuffer) || job.signal?.aborted) throw err;
        // Not a failed attempt: the image is sound, only laid out so that this route cannot take it.
        log.warn({ reason: err.details }, 'the image cannot be streamed; downloading it again into the buffer');
        job.meter.remark({ fallback: `streaming stopped: ${err.details}; buffered instead` });
        path = 'buffer';
        return bufferOnce(job, transfer, expected);
      }
    });
    return { path, bytes };
  } finally {
    await dispatchers.close();
  }
}

async function expectedChecksum(info: ImageInfo, transfer: Transfer, md5Enabled: boolean): Promise<ExpectedDigest> {
  let digest = info.checksum.value;
  if (info.checksum.isUrl) {
    const text = await transfer.text(digest, 'Checksum file download');
    digest = parseChecksumFile(text, imageFileNames(info.urls), shownUrl(digest));
  }
  return expectedDigest(info.checksum.algo, digest, md5Enabled);
}

/** Runs `body` with an image hash that is stopped afterwards, however `body` ends. */
async function withImageHash<T>(algo: string, body: (hash: ImageHash) => Promise<T>): Promise<T> {
  const hash = new ImageHash(algo);
  try {
    return await body(hash);
  } finally {
    await hash.close();
  }
}

/** The tap: counts the bytes as they pass, and hashes them unless `hash` is null. */
function tap(hash: ImageHash | null, meter: ProgressMeter) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    for await (const chunk of source) {
      const copying = hash?.update(chunk);
      if (copying) await copying;
      meter.add(chunk.length);
      yield chunk;
    }
  };
}

/**
 * Drives one sink: `body` calls `accept` with the head (through the gate) and writes. The sink is released
 * however it ends and, after a failure once its head was accepted, wiped (a failed wipe is logged). A cancelled
 * command releases it at once, which stops its tools and writers whatever they are waiting for.
 */
async function drive<I>(
  sink: Sink<I>,
  log: Logger,
  signal: AbortSignal | undefined,
  body: (accept: (head: Buffer, facts: HeadFacts) => Promise<void>) => Promise<void>,
): Promise<void> {
  let touched = false;
  const stop = () => void sink.release().catch(() => undefined);
  signal?.addEventListener('abort', stop, { once: true });
  try {
    await body(async (head, facts) => {
      await sink.checkHead(head, facts);
      touched = true;
    });
  } catch (err) {
    // Whatever reached the target is unverified: once the last write landed, leave nothing that looks bootable.
    await sink.release();
    if (touched)
      await sink
        .wipe()
        .catch((e) => log.warn({ sink: sink.name, err: errorText(e) }, 'could not clear a partly written image'));
    throw err;
  } finally {
    signal?.removeEventListener('abort', stop);
    await sink.release();
  }
}

/** A file stream's options: a cancelled command destroys it, which ends the write it feeds. */
function cancelOption(job: PipelineJob): { signal?: AbortSignal } {
  return job.signal ? { signal: job.signal } : {};
}

/**
 * One pass of source ─▶ sniff ─▶ tap ─▶ gate ─▶ sink; `after` runs before the sink counts as done (verification),
 * `committed` after its commit, still inside the drive: a failure there wipes the committed image too.
 */
async function pour(
  image: OpenedImage,
  route: Route,
  leg: Leg,
  hash: ImageHash,
  after: (r: SinkResult) => Promise<void>,
  committed?: (r: SinkResult) => Promise<void>,
) {
  const { meter, services } = leg.job;
  try {
    const sniffed = await sniffCompression(image.body);
    const facts: HeadFacts = { totalBytes: image.totalBytes, compression: sniffed.kind };
    const sink = await route.sink(sniffed.kind, leg);
    let result!: SinkResult;
    await drive(sink, services.log, leg.job.signal, async (accept) => {
      const tapped = tap(route.hashInline(sniffed.kind) ? hash : null, meter)(sniffed.chunks);
      await sink.write(gateFor(sniffed.kind, sink.headBytes, (head) => accept(head, facts))(tapped));
      result = await sink.finish();
      await after(result);
      // Verified: only now does the disk get the image's first and last MiB, and with them its partition table.
      await sink.commit();
      await committed?.(result);
    });
    return { result, compression: sniffed.kind };
  } catch (err) {
    // A stage that failed may have left the download unread: end it (a cancelled command's signal ends it too).
    image.cancel();
    throw err;
  }
}

async function streamOnce(
  job: PipelineJob,
  transfer: Transfer,
  expected: ExpectedDigest,
  route: Route,
): Promise<number> {
  const { info, device, meter } = job;
  const { guard, log } = job.services;
  const leg: Leg = { job, target: deviceTarget(job) };
  // The phase includes the request, so that its logged duration is the whole transfer.
  meter.start(route.phase, null);
  const image = await transfer.open(info.urls);
  meter.setTotal(image.totalBytes ?? null);
  const { result, compression } = await withImageHash(expected.algo, (hash) =>
    pour(
      image,
      route,
      leg,
      hash,
      async () => verifyDigest(expected, await hash.digest(), info.id, image.url),
      // As bufferToDevice does: a table that cannot be settled fails the write, and drive() wipes it.
      async (r) => {
        meter.start('table', null);
        await settlePartitionTable(device, r.head, guard, log);
        leg.target.done();
      },
    ),
  );
  log.info(
    { bytes: result.bytes, compression, device: device.path, checksum: expected.algo },
    'image streamed and verified',
  );
  return result.bytes;
}

/** The job's device, with the write journal beside the status file (the next start clears a write left unfinished). */
function deviceTarget(job: PipelineJob): DeviceTarget {
  const { config, guard, log } = job.services;
  return new DeviceTarget(job.device, guard, log, new WriteJournal(journalPath(config.statusFile)));
}

async function bufferOnce(job: PipelineJob, transfer: Transfer, expected: ExpectedDigest): Promise<number> {
  const { info, meter } = job;
  const { config, log } = job.services;
  meter.start(ROUTES.buffer.phase, null);
  await cleanStaleBuffers(config.image.bufferDir, log);
  const image = await transfer.open(info.urls);
  let budget: Awaited<ReturnType<typeof bufferBudget>>;
  try {
    budget = await bufferBudget(config.image.bufferDir, image.totalBytes);
  } catch (err) {
    image.cancel();
    throw err;
  }
  const file = bufferPath(config.image.bufferDir, info.id);
  const leg: Leg = { job, target: deviceTarget(job), buffer: { file, limit: budget.limit } };
  try {
    meter.setTotal(image.totalBytes ?? null);
    return await withImageHash(expected.algo, async (hash) => {
      const { compression } = await pour(image, ROUTES.buffer, leg, hash, async () => undefined);
      const inline = compression === 'none' ? null : await hash.digest();
      const checksum = bufferChecksum(meter, hash, file, inline, expected, { imageId: info.id, url: image.url });
      meter.start('inspect', null);
      const found = await inspectBuffer(file, info.diskFormat, config, job.device).catch(async (err: unknown) => {
        throw await checksum.explain(err);
      });
      leg.job.signal?.throwIfAborted();
      try {
        await transfer.repeat(() => bufferToDevice(found, leg, checksum.verify));
      } catch (err) {
        throw await checksum.explain(err);
      }
      return found.virtualSize;
    });
  } finally {
    await discardBuffer(file);
  }
}

/** The second leg of a buffered image: the inspected file onto the device, copied (raw) or by qemu-img. */
async function bufferToDevice(found: InspectedBuffer, leg: Leg, verify: () => Promise<void>): Promise<void> {
  const { meter, device, services } = leg.job;
  const { config, guard, log } = services;
  const facts: HeadFacts = { totalBytes: found.size, compression: 'none' };
  const settle = async (sink: { commit(): Promise<void> }, result: SinkResult) => {
    await verify();
    // Verified: only now does the disk get the image's first and last MiB, and with them its partition table.
    await sink.commit();
    meter.start('table', null);
    await settlePartitionTable(device, result.head, guard, log);
    leg.target.done();
  };
  if (found.format === 'raw') {
    const sink = await BlockDeviceSink.open(leg.target, { inspected: true });
    await drive(sink, log, leg.job.signal, async (accept) => {
      await accept(found.head, facts);
      meter.start('write', found.virtualSize);
      const file = createReadStream(found.file, { highWaterMark: 8 * 1024 * 1024, ...cancelOption(leg.job) });
      await sink.write(tap(null, meter)(file));
      await settle(sink, await sink.finish());
    });
    return;
  }
  const sink = new QemuImgSink(
    leg.target,
    config.image.convertMemoryLimitMiB,
    (bytes) => meter.set(bytes),
    leg.job.signal,
  );
  await drive(sink, log, leg.job.signal, async (accept) => {
    await accept(found.head, facts);
    meter.start('convert', found.virtualSize);
    await sink.write(found);
    await settle(sink, await sink.finish());
  });
}
