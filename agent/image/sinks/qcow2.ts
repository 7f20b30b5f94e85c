// The streamed qcow2 sink (the `qcow2` route of pipeline.ts): the image's head is inspected (the rules every
// path shares, then the reader's own geometry checks in qcow2/header.ts) before the disk is touched, then
// the qcow2 reader places each cluster on the device as it arrives. A packed image (gzip, zstd, xz) is
// decoded by the same tools as every compressed image, but read back by the agent, which has to see the
// image's bytes to place them. No buffer file, no qemu-img: memory stays at the reader's spool budget and
// the writer's blocks, whatever the image's size. What the reader cannot take is an ImageWriteError with
// `needsBuffer`, and the pipeline sends the image the buffered way instead (docs/qcow2-streaming.md).
import type { Config } from '../../config/config.ts';
import { ImageWriteError } from '../../errors.ts';
import { availableMemory } from '../../host/memory.ts';
import { MEMORY_RESERVE } from '../buffer.ts';
import { refuseUnsafe } from '../gates.ts';
import type { ImageInfo } from '../image-info.ts';
import { INSPECT_HEAD_BYTES, inspectImage } from '../inspect.ts';
import { decodedStream } from '../qcow2/decoded-stream.ts';
import { qcow2PrefixView } from '../qcow2/guest.ts';
import { parseQcow2Header } from '../qcow2/header.ts';
import { PositionalWriter } from '../qcow2/positional-writer.ts';
import { Qcow2Reader } from '../qcow2/reader.ts';
import { needsBuffer } from '../qcow2/spool.ts';
import type { Compression } from '../sniff.ts';
import type { DeviceTarget } from './device-target.ts';
import { HeldBack } from './held-back.ts';
import type { HeadFacts, Sink, SinkResult } from './sink.ts';

type ImageConfig = Config['image'];

/** Whether a deploy takes the qcow2 route: a qcow2 image, unless the spool is configured to 0. */
export function streamsQcow2(info: Pick<ImageInfo, 'diskFormat'>, config: ImageConfig): boolean {
  return info.diskFormat === 'qcow2' && config.qcow2SpoolMiB > 0;
}

/**
 * RAM for qcow2 data that arrives before its table: the configured amount, within what the machine (and the agent's
 * memory cgroup) has free.
 */
async function spoolBudget(configuredMiB: number): Promise<number> {
  const configured = configuredMiB * 1024 * 1024;
  const free = await availableMemory();
  return free === null ? configured : Math.max(0, Math.min(configured, free.bytes - MEMORY_RESERVE));
}

export class Qcow2Sink implements Sink {
  readonly name = 'qcow2 reader';
  readonly headBytes: number;
  private reader: Qcow2Reader | null = null;
  private writer: PositionalWriter | null = null;
  private held: HeldBack | null = null;
  private virtualSize = 0;

  private constructor(
    /** The download's compression: the sink decodes it before the reader sees the image. */
    private readonly kind: Compression,
    private readonly target: DeviceTarget,
    private readonly declared: string | undefined,
    private readonly config: ImageConfig,
    private readonly spoolBytes: number,
  ) {
    this.headBytes = target.headBytes;
  }

  static async open(
    kind: Compression,
    target: DeviceTarget,
    declared: string | undefined,
    config: ImageConfig,
  ): Promise<Qcow2Sink> {
    return new Qcow2Sink(kind, target, declared, config, await spoolBudget(config.qcow2SpoolMiB));
  }

  async checkHead(head: Buffer, facts: HeadFacts): Promise<void> {
    const found = inspectImage(head);
    refuseUnsafe(found, this.declared, this.config.permittedFormats, !this.config.disableDeepInspection);
    // Only with deep inspection off can a declared qcow2 be something else: the buffered route judges it.
    if (found.format !== 'qcow2') throw needsBuffer(`the image declared qcow2 is ${found.format}`);
    const { device } = this.target;
    if (found.virtualSize !== undefined && found.virtualSize > device.size) {
      throw new ImageWriteError(
        `the image's virtual size (${found.virtualSize} bytes) is larger than ${device.path} (${device.size} bytes)`,
        {
          tooLarge: true,
        },
      );
    }
    const declaredLength = facts.compression === 'none' ? facts.totalBytes : undefined;
    const layout = parseQcow2Header(head, { deviceSize: device.size, declaredLength });
    this.virtualSize = layout.virtualSize;
    if (device.precheck)
      await device.precheck(await qcow2PrefixView(head, head.length < this.headBytes, declaredLength));
    await this.target.prepare();
    this.held = new HeldBack(device.size);
    const { guard, log } = this.target;
    this.writer = await PositionalWriter.open(device.path, layout.virtualSize, guard, log, this.held);
    this.reader = new Qcow2Reader(layout, this.writer, { spoolBudget: this.spoolBytes, declaredLength });
  }

  async write(chunks: AsyncIterable<Buffer>): Promise<void> {
    const image = this.kind === 'none' ? chunks : decodedStream(this.kind, chunks);
    // The gate in front calls checkHead while the first chunk is pulled, so the reader exists from then on.
    for await (const chunk of image) await this.started().push(chunk);
    await this.started().end();
  }

  private started(): Qcow2Reader {
    if (!this.reader) throw new ImageWriteError('the qcow2 reader was given bytes before the header was checked');
    return this.reader;
  }

  async finish(): Promise<SinkResult> {
    await this.writer!.finish();
    this.target.log.info(
      { virtual_size: this.virtualSize, spool_peak: this.reader!.spoolPeak, spool_budget: this.spoolBytes },
      'qcow2 image placed by the streaming reader',
    );
    return { bytes: this.virtualSize, head: this.held!.imageHead(Math.min(INSPECT_HEAD_BYTES, this.virtualSize)) };
  }

  /** The guest's first and last MiB, held back until the rest is on the device and verified. */
  commit(): Promise<void> {
    return this.held!.commit(this.target.path, this.target.guard);
  }

  async release(): Promise<void> {
    await this.writer?.release();
  }

  wipe(): Promise<void> {
    return this.target.wipe();
  }
}
