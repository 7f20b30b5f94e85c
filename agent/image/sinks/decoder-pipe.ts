// Compressed images on the stream path: the decoder (pigz, zstd or xz) writes into `dd` through a kernel
// pipe, and dd writes the device with O_DIRECT, so the decoded bytes (often several times the download)
// never pass through the agent: carried through Node they cost time and, for gzip, memory that grew with the
// image (docs/performance.md).
// The agent still sees the decoded head before anything is written: the gate (gates.ts) decodes it with a
// throwaway decoder and hands it to checkHead.
import { spawn, type ChildProcess } from 'node:child_process';
import { ImageWriteError } from '../../errors.ts';
import { mortal } from '../../exec.ts';
import { DECODER_TOOL, type Compressed } from '../sniff.ts';
import type { DeviceTarget } from './device-target.ts';
import type { HeadFacts, Sink, SinkResult } from './sink.ts';
import { assertStarted, decodeFailure, exitOf, failed, feed, reason, type Exit } from './tool-process.ts';

/**
 * `<tool> -dc | dd of=<device>`: compressed bytes in, the decoded image on the device. Spawned with
 * node:child_process rather than execa: handed a stream for stdout, execa pumps the data through the
 * agent, which is the cost this path exists to avoid; child_process gives the decoder dd's pipe itself.
 */
export class DecoderPipe implements Sink {
  readonly name = 'decoder pipe';
  readonly headBytes: number;
  private readonly decoded: Promise<Exit>;
  private readonly copied: Promise<Exit>;
  private head: Buffer = Buffer.alloc(0);

  private constructor(
    private readonly kind: Compressed,
    private readonly target: DeviceTarget,
    private readonly decoder: ChildProcess,
    private readonly dd: ChildProcess,
  ) {
    this.headBytes = target.headBytes;
    this.decoded = exitOf(decoder);
    this.copied = exitOf(dd);
    // A decoder that dies leaves its stdin broken; the exit status tells the story.
    decoder.stdin!.on('error', () => undefined);
  }

  static async start(kind: Compressed, target: DeviceTarget): Promise<DecoderPipe> {
    const device = target.path;
    await target.guard.assertWritable(device, 'write an image to');
    // Whole 1 MiB blocks from the pipe (iflag=fullblock): dd drops O_DIRECT for good after its first short
    // write, which a pipe would otherwise give it at once. One fdatasync at the end, as for raw images.
    const dd = spawn(...mortal('dd', [`of=${device}`, 'bs=1M', 'iflag=fullblock', 'oflag=direct', 'conv=fdatasync']), {
      stdio: ['pipe', 'ignore', 'pipe'],
      env: { ...process.env, LC_ALL: 'C' },
    });
    const decoder = spawn(...mortal(DECODER_TOOL[kind], ['-dc']), { stdio: ['pipe', dd.stdin!, 'pipe'] });
    // The decoder holds the pipe's write end now; dd sees the end of its input when the decoder exits.
    dd.stdin!.destroy();
    return new DecoderPipe(kind, target, decoder, dd);
  }

  private get device(): string {
    return this.target.path;
  }

  async checkHead(head: Buffer, facts: HeadFacts): Promise<void> {
    await this.target.refuseStreamedHead(head, facts);
    this.head = head;
    await this.target.clear();
  }

  /** Feeds the compressed image in; a download error or a refusal is thrown from here. */
  async write(compressed: AsyncIterable<Buffer>): Promise<void> {
    await feed(compressed, this.decoder.stdin!, this.decoded);
  }

  /** Waits until the image is decoded and on the device (dd syncs it); a tool that stopped tells why here. */
  async finish(): Promise<SinkResult> {
    const [decoded, copied] = await Promise.all([this.decoded, this.copied]);
    assertStarted(copied, decoded);
    // dd first: when dd fails, the decoder's own failure is only the broken pipe that followed.
    if (failed(copied)) {
      if (/No space left on device/.test(copied.stderr)) {
        throw new ImageWriteError(`the decompressed image is larger than ${this.device}`, { tooLarge: true });
      }
      throw new ImageWriteError(`writing the decompressed image to ${this.device} failed: ${reason(copied)}`);
    }
    if (failed(decoded)) throw decodeFailure(this.kind, decoded, this.device);
    const bytes = /^(\d+) bytes/m.exec(copied.stderr);
    if (!bytes) throw new ImageWriteError(`dd did not report how much it wrote to ${this.device}: ${reason(copied)}`);
    return { bytes: Number(bytes[1]), head: this.head };
  }

  /** Stops both tools (a no-op once they have finished) and waits for them, so that no write is still landing. */
  async release(): Promise<void> {
    this.decoder.kill();
    this.dd.kill();
    await Promise.all([this.decoded, this.copied]);
  }

  wipe(): Promise<void> {
    return this.target.clear();
  }
}
