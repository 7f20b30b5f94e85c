// The gate stage of the data path: nothing reaches a sink before the image's head has been seen and
// accepted. For plain bytes the head is simply the first bytes; for a compressed download the gate holds the
// first compressed chunks back and decodes them with a throwaway decoder that is stopped once the head is out.
// Also the refusals every path shares (a container format disguised as raw, an unsafe header).
import { InvalidImage } from '../errors.ts';
import { assertStarted, failed, type Tool } from '../exec.ts';
import { afterHead, readAtLeast, rest } from './peek.ts';
import type { ImageInspection } from './inspect.ts';
import type { Compressed, Compression } from './sniff.ts';
import { decodeFailure, startDecoder } from './sinks/tool-process.ts';

type Check = (head: Buffer) => Promise<void>;

/** Collects the first `bytes` of a stream, hands them to `check` (which may refuse), then passes everything on. */
function headGate(bytes: number, check: Check) {
  return (source: AsyncIterable<Buffer>): AsyncIterable<Buffer> => {
    const it = source[Symbol.asyncIterator]();
    return afterHead(it, async () => {
      const head = await readAtLeast(it, bytes);
      await check(head);
      return head;
    });
  };
}

/** Compressed bytes held back while looking for the head: far more than any real image needs for 64 KiB. */
const MAX_HELD_BYTES = 8 * 1024 * 1024;

/** A decoder whose output the agent reads only until it has the first `bytes`; then it is stopped. */
class HeadProbe {
  private readonly child: Tool;
  private readonly parts: Buffer[] = [];
  private length = 0;
  private settled = false;
  private readonly done: Promise<void>;

  constructor(
    private readonly kind: Compressed,
    private readonly bytes: number,
  ) {
    this.child = startDecoder(kind, 'pipe');
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
    const exit = await this.child.exit;
    assertStarted(exit);
    if (failed(exit)) throw decodeFailure(this.kind, exit, 'the head of the image');
    return all;
  }

  async stop(): Promise<void> {
    this.child.kill();
    this.child.stdin!.destroy();
    await this.child.exit;
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
          throw new InvalidImage(
            `the first ${MAX_HELD_BYTES} bytes of the ${kind} image decode to less than ${bytes} bytes`,
          );
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

/** The gate for a stream of `compression`: `check` sees the image's first `bytes`, decoded, before anything passes. */
export function gateFor(compression: Compression, bytes: number, check: Check) {
  return compression === 'none' || bytes === 0 ? headGate(bytes, check) : decodedHeadGate(compression, bytes, check);
}

/** Refuses an image whose header is unsafe or, with `deep`, is not the declared or a permitted format. */
export function refuseUnsafe(
  found: ImageInspection,
  declared: string | undefined,
  permitted: readonly string[],
  deep: boolean,
): void {
  if (found.unsafe.length > 0)
    throw new InvalidImage(`Security: Image failed safety check: ${found.unsafe.join('; ')}`);
  if (!deep) return;
  if (declared && declared !== 'unknown' && declared !== found.format) {
    throw new InvalidImage(`Security: Expected format was ${declared}, but image was actually ${found.format}`);
  }
  if (!permitted.includes(found.format)) {
    throw new InvalidImage(
      `Security: Detected image format was ${found.format}, but only ${permitted.join(', ')} are allowed`,
    );
  }
}
