// Compressed images on the stream path: the decoder (pigz, zstd or xz) writes into `dd` through a kernel
// pipe, and dd writes the device with O_DIRECT, so the decoded bytes (often several times the download)
// never pass through the agent: carried through Node they cost time and, for gzip, memory that grew with the
// image (docs/performance.md). Only the bytes bound for the device's first and last MiB do: a small shell
// hands the decoder's first MiB to the agent, has dd write the rest up to the device's last MiB, and hands
// what follows to the agent too; the agent holds those back (held-back.ts) and writes them once the image is
// verified, so that a SIGKILLed agent leaves no partition table behind.
// The agent still sees the decoded head before anything is written: the gate (gates.ts) decodes it with a
// throwaway decoder and hands it to checkHead.
import { ImageWriteError } from '../../errors.ts';
import { assertStarted, type Exit, failed, mortal, reason, startTool, type Tool } from '../../exec.ts';
import { INSPECT_HEAD_BYTES } from '../inspect.ts';
import type { Compressed } from '../sniff.ts';
import type { DeviceTarget } from './device-target.ts';
import { HeldBack } from './held-back.ts';
import type { HeadFacts, Sink, SinkResult } from './sink.ts';
import { decodeFailure, feed, startDecoder } from './tool-process.ts';

// The three steps on the decoder's output, each a child with the parent-death signal (the shell's own is no
// help to them) and waited for in the background, so that a TERM stops the step at once and the shell exits only
// once it is gone. fd 3: a background child's stdin would otherwise be /dev/null.
// Whole 1 MiB blocks from the pipe (iflag=fullblock): dd drops O_DIRECT for good after its first short
// write, which a pipe would otherwise give it at once. One fdatasync at the end, as for raw images.
const SCRIPT = [
  'setpriv=$1 dev=$2 head=$3 middle=$4',
  'pid=',
  'trap \'[ -n "$pid" ] && { kill -KILL "$pid"; wait "$pid"; }; exit 143\' TERM',
  'exec 3<&0',
  'step() { "$setpriv" --pdeathsig KILL -- "$@" <&3 & pid=$!; wait "$pid"; rc=$?; pid=; return "$rc"; }',
  'step dd bs="$head" count=1 iflag=fullblock status=none || exit',
  'step dd of="$dev" bs=1M seek="$head" count="$middle" iflag=fullblock,count_bytes oflag=direct,seek_bytes conv=fdatasync || exit',
  'step cat',
].join('\n');

/**
 * `<tool> -dc | dd of=<device>`: compressed bytes in, the decoded image on the device. The shell gets the
 * decoder's stdout pipe itself as its stdin, so that the decoded bytes go from one tool to the other in the
 * kernel, not through the agent.
 */
export class DecoderPipe implements Sink {
  readonly name = 'decoder pipe';
  readonly headBytes: number;
  private readonly decoded: Promise<Exit>;
  private readonly copied: Promise<Exit>;
  /** Bytes the shell handed over so far: the image's first MiB, then what follows the device's last MiB's start. */
  private handed = 0;
  /** The decoded image went past the device's end. */
  private overflow = false;

  private constructor(
    private readonly kind: Compressed,
    private readonly target: DeviceTarget,
    private readonly decoder: Tool,
    private readonly dd: Tool,
    private readonly held: HeldBack,
  ) {
    this.headBytes = target.headBytes;
    this.decoded = decoder.exit;
    this.copied = dd.exit;
    // A decoder that dies leaves its stdin broken; the exit status tells the story.
    decoder.stdin!.on('error', () => undefined);
    dd.stdout!.on('data', (bytes: Buffer) => this.hold(bytes));
  }

  static async start(kind: Compressed, target: DeviceTarget): Promise<DecoderPipe> {
    const device = target.path;
    await target.guard.assertWritable(device, 'write an image to');
    const held = new HeldBack(target.device.size);
    const [setpriv] = mortal('true', []);
    const args = [setpriv, device, String(held.headEnd), String(held.tailStart - held.headEnd)];
    const decoder = startDecoder(kind, 'pipe');
    const dd = startTool('sh', ['-c', SCRIPT, 'decoded-image', ...args], {
      // none when the decoder could not be started, which its exit tells
      stdin: decoder.stdout ?? 'ignore',
      env: { LC_ALL: 'C' },
    });
    // The shell holds the pipe's read end now (nothing was read from it: the decoder has had no input yet).
    decoder.stdout?.destroy();
    return new DecoderPipe(kind, target, decoder, dd, held);
  }

  /** The shell's output: the image's first MiB, then the bytes from the device's last MiB on, held back. */
  private hold(bytes: Buffer): void {
    const { headEnd, tailStart } = this.held;
    let at = 0;
    while (at < bytes.length && !this.overflow) {
      const inHead = this.handed < headEnd;
      const offset = inHead ? this.handed : tailStart + this.handed - headEnd;
      const room = inHead ? headEnd - this.handed : this.target.device.size - offset;
      if (room <= 0) {
        this.overflow = true;
        this.dd.kill();
        return;
      }
      const n = Math.min(room, bytes.length - at);
      this.held.take(offset, bytes.subarray(at, at + n));
      at += n;
      this.handed += n;
    }
  }

  private get device(): string {
    return this.target.path;
  }

  async checkHead(head: Buffer, facts: HeadFacts): Promise<void> {
    await this.target.refuseStreamedHead(head, facts);
    await this.target.prepare();
  }

  /** Feeds the compressed image in; a download error or a refusal is thrown from here. */
  async write(compressed: AsyncIterable<Buffer>): Promise<void> {
    await feed(compressed, this.decoder.stdin!, this.decoded);
  }

  /** Waits until the image is decoded and on the device (dd syncs it); a tool that stopped tells why here. */
  async finish(): Promise<SinkResult> {
    const [decoded, copied] = await Promise.all([this.decoded, this.copied]);
    assertStarted(copied, decoded);
    if (this.overflow) {
      throw new ImageWriteError(`the decompressed image is larger than ${this.device}`, { tooLarge: true });
    }
    // dd first: when dd fails, the decoder's own failure is only the broken pipe that followed.
    if (failed(copied)) {
      throw new ImageWriteError(`writing the decompressed image to ${this.device} failed: ${reason(copied)}`);
    }
    if (failed(decoded)) throw decodeFailure(this.kind, decoded, this.device);
    const bytes = /^(\d+) bytes/m.exec(copied.stderr);
    if (!bytes && this.handed >= this.held.headEnd) {
      throw new ImageWriteError(`dd did not report how much it wrote to ${this.device}: ${reason(copied)}`);
    }
    return { bytes: Number(bytes?.[1] ?? 0) + this.handed, head: this.held.imageHead(INSPECT_HEAD_BYTES) };
  }

  /** The held-back first and last MiB, once the rest is on the device (dd synced it) and verified. */
  commit(): Promise<void> {
    return this.held.commit(this.device, this.target.guard);
  }

  /** Stops both tools (a no-op once they have finished) and waits for them, so that no write is still landing. */
  async release(): Promise<void> {
    this.decoder.kill();
    this.dd.kill();
    await Promise.all([this.decoded, this.copied]);
  }

  wipe(): Promise<void> {
    return this.target.wipe();
  }
}
