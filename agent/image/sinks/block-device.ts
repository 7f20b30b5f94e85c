// The sink for plain image bytes onto a device: the block writer (O_DIRECT, several writes in flight).
// Fed by the stream path's download, or by the buffer file once inspection passed.
import type { DeviceGuard } from '../../safety/device-guard.ts';
import { BlockWriter } from './block-writer.ts';
import type { DeviceTarget } from './device-target.ts';
import { HeldBack } from './held-back.ts';
import type { HeadFacts, Sink, SinkResult } from './sink.ts';
import { INSPECT_HEAD_BYTES } from '../inspect.ts';
import { pipeline } from 'node:stream/promises';

export class BlockDeviceSink implements Sink {
  readonly name = 'block device';
  readonly headBytes: number;
  private head: Buffer = Buffer.alloc(0);

  private constructor(
    private readonly target: DeviceTarget,
    private readonly writer: BlockWriter,
    private readonly held: HeldBack,
    /** The head was inspected already (a buffered image): only clear the device. */
    private readonly inspected: boolean,
  ) {
    this.headBytes = inspected ? INSPECT_HEAD_BYTES : target.headBytes;
  }

  static async open(target: DeviceTarget, opts: { inspected: boolean }): Promise<BlockDeviceSink> {
    const held = new HeldBack(target.device.size);
    const writer = await BlockWriter.open(target.path, target.device.size, target.guard as DeviceGuard, held);
    return new BlockDeviceSink(target, writer, held, opts.inspected);
  }

  async checkHead(head: Buffer, facts: HeadFacts): Promise<void> {
    if (!this.inspected) await this.target.refuseStreamedHead(head, facts);
    this.head = head;
    await this.target.prepare();
  }

  async write(chunks: AsyncIterable<Buffer>): Promise<void> {
    // The writer syncs the device when its input ends, so the bytes are durable once this resolves (all but the
    // held-back ones, which commit() writes).
    await pipeline(chunks, this.writer);
  }

  async finish(): Promise<SinkResult> {
    return { bytes: this.writer.written, head: this.head };
  }

  commit(): Promise<void> {
    return this.held.commit(this.target.path, this.target.guard);
  }

  release(): Promise<void> {
    return this.writer.release();
  }

  wipe(): Promise<void> {
    return this.target.wipe();
  }
}
