// Compressed images on the stream path: the decoder (pigz, zstd or xz) writes into `dd` through a kernel
// pipe, and dd writes the device with O_DIRECT, so the decoded bytes (often several times the download)
// never pass through the agent. Carried through Node, they made the deploy take 1.08–1.18× `curl | zstd
// -dc | dd` on two cores, and made the agent's memory grow with a gzip image; now zstd takes 0.74–0.99×.
// The agent must still see the decoded head before anything is written (a disguised format is refused,
// old signatures are cleared): `decodedHeadGate` holds the first compressed chunks back and decodes them
// with a second, throwaway decoder that is stopped as soon as the head is out.
import { spawn, type ChildProcess } from 'node:child_process';
import { ImageWriteError, InvalidImage } from '../errors.ts';
import { mortal } from '../exec.ts';
import type { DeviceGuard } from '../safety/device-guard.ts';
import { TooLargeError } from './block-writer.ts';
import { rest } from './peek.ts';
import { DECODER_TOOL, type Compressed } from './decompress.ts';
import { assertStarted, decodeFailure, exitOf, failed, feed, reason, type Exit } from './tool-process.ts';

/** Compressed bytes held back while looking for the head: far more than any real image needs for 64 KiB. */
const MAX_HELD_BYTES = 8 * 1024 * 1024;

/** A decoder whose output the agent reads only until it has the first `bytes`; then it is stopped. */
class HeadProbe {
  private readonly child: ChildProcess;
  private readonly exit: Promise<Exit>;
  private readonly parts: Buffer[] = [];
  private length = 0;
  private settled = false;
  private readonly done: Promise<void>;

  constructor(
    private readonly kind: Compressed,
    private readonly bytes: number,
  ) {
    this.child = spawn(...mortal(DECODER_TOOL[kind], ['-dc']), { stdio: ['pipe', 'pipe', 'pipe'] });
    this.exit = exitOf(this.child);
    // The probe may be stopped while it is still being fed.
    this.child.stdin!.on('error', () => undefined);
    const out = this.child.stdout!;
    this.done = new Promise((resolve) => {
      const settle = () => {
        this.settled = true;
        resolve();
      };
      out.on('data', (chunk: Buffer) => {
        this.parts.push(chunk);
        this.length += chunk.length;
        if (this.length >= bytes) {
          out.destroy();
          settle();
        }
      });
      out.on('close', settle);
    });
  }

  /** The head is out, or the decoder stopped producing. */
  get complete(): boolean {
    return this.settled;
  }

  async feed(chunk: Buffer): Promise<void> {
    if (this.child.stdin!.write(chunk)) return;
    await Promise.race([new Promise((resolve) => this.child.stdin!.once('drain', resolve)), this.done]);
  }

  /** The decoded head; `inputEnded` says the whole compressed image has been fed. */
  async head(inputEnded: boolean): Promise<Buffer> {
    if (inputEnded) this.child.stdin!.end();
    await this.done;
    const all = Buffer.concat(this.parts);
    if (this.length >= this.bytes) return all.subarray(0, this.bytes);
    // The decoder closed its output early: the image is small, or its data is broken. zstd can still wait
    // for its reading thread then, so its input is closed before waiting for it to exit.
    this.child.stdin!.end();
    const exit = await this.exit;
    assertStarted(exit);
    if (failed(exit)) throw decodeFailure(this.kind, exit, 'the head of the image');
    return all;
  }

  async stop(): Promise<void> {
    this.child.kill();
    this.child.stdin!.destroy();
    await this.exit;
  }
}

/**
 * A stage over compressed chunks: holds them back until a throwaway decoder has produced the image's
 * first `bytes` (fewer if the image is smaller), gives those to `check` (which may refuse), then passes
 * every chunk on unchanged.
 */
export function decodedHeadGate(kind: Compressed, bytes: number, check: (head: Buffer) => Promise<void>) {
  return async function* (source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    const it = source[Symbol.asyncIterator]();
    const held: Buffer[] = [];
    let heldBytes = 0;
    let ended = false;
    const probe = new HeadProbe(kind, bytes);
    try {
      while (!probe.complete) {
        const r = await it.next();
        if (r.done) {
          ended = true;
          break;
        }
        held.push(r.value);
        heldBytes += r.value.length;
        if (heldBytes > MAX_HELD_BYTES) {
          throw new InvalidImage(`the first ${MAX_HELD_BYTES} bytes of the ${kind} image decode to less than ${bytes} bytes`);
        }
        await probe.feed(r.value);
      }
      await check(await probe.head(ended));
    } finally {
      await probe.stop();
    }
    yield* held;
    if (!ended) yield* rest(it);
  };
}

/**
 * `<tool> -dc | dd of=<device>`: compressed bytes in, the decoded image on the device. Spawned with
 * node:child_process rather than execa: handed a stream for stdout, execa pumps the data through the
 * agent, which is the cost this path exists to avoid; child_process gives the decoder dd's pipe itself.
 */
export class DeviceDecoder {
  private readonly decoded: Promise<Exit>;
  private readonly copied: Promise<Exit>;

  private constructor(
    private readonly kind: Compressed,
    private readonly device: string,
    private readonly decoder: ChildProcess,
    private readonly dd: ChildProcess,
  ) {
    this.decoded = exitOf(decoder);
    this.copied = exitOf(dd);
    // A decoder that dies leaves its stdin broken; the exit status tells the story.
    decoder.stdin!.on('error', () => undefined);
  }

  static async start(kind: Compressed, device: string, guard: DeviceGuard): Promise<DeviceDecoder> {
    await guard.assertWritable(device, 'write an image to');
    // Whole 1 MiB blocks from the pipe (iflag=fullblock): dd drops O_DIRECT for good after its first short
    // write, which a pipe would otherwise give it at once. One fdatasync at the end, as for raw images.
    const dd = spawn(...mortal('dd', [`of=${device}`, 'bs=1M', 'iflag=fullblock', 'oflag=direct', 'conv=fdatasync']), {
      stdio: ['pipe', 'ignore', 'pipe'],
      env: { ...process.env, LC_ALL: 'C' },
    });
    const decoder = spawn(...mortal(DECODER_TOOL[kind], ['-dc']), { stdio: ['pipe', dd.stdin!, 'pipe'] });
    // The decoder holds the pipe's write end now; dd sees the end of its input when the decoder exits.
    dd.stdin!.destroy();
    return new DeviceDecoder(kind, device, decoder, dd);
  }

  /** Feeds the compressed image in and waits until it is decoded and on the device; returns the bytes written. */
  async write(compressed: AsyncIterable<Buffer>): Promise<number> {
    // A download error or a refusal is thrown from here; a tool that stopped tells why in finish().
    await feed(compressed, this.decoder.stdin!, this.decoded);
    return this.finish();
  }

  private async finish(): Promise<number> {
    const [decoded, copied] = await Promise.all([this.decoded, this.copied]);
    assertStarted(copied, decoded);
    // dd first: when dd fails, the decoder's own failure is only the broken pipe that followed.
    if (failed(copied)) {
      if (/No space left on device/.test(copied.stderr)) throw new TooLargeError(`the decompressed image is larger than ${this.device}`);
      throw new ImageWriteError(`writing the decompressed image to ${this.device} failed: ${reason(copied)}`);
    }
    if (failed(decoded)) throw decodeFailure(this.kind, decoded, this.device);
    const bytes = /^(\d+) bytes/m.exec(copied.stderr);
    if (!bytes) throw new ImageWriteError(`dd did not report how much it wrote to ${this.device}: ${reason(copied)}`);
    return Number(bytes[1]);
  }

  /** Stops both tools (a no-op once they have finished) and waits for them, so that no write is still landing. */
  async release(): Promise<void> {
    this.decoder.kill();
    this.dd.kill();
    await Promise.all([this.decoded, this.copied]);
  }
}
