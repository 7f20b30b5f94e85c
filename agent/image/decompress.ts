// On-the-fly decompression of a downloaded image, chosen by the first bytes: gzip in-process (zlib),
// zstd and xz through Debian's tools. Used as a stage of a stream pipeline.
import { Readable, type Writable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { AgentError, InvalidImage, errorText } from '../errors.ts';
import { spawnTool } from '../exec.ts';
import { readAtLeast, rest } from './peek.ts';

export type Compression = 'gzip' | 'zstd' | 'xz' | 'none';

const MAGIC: [Compression, Buffer][] = [
  ['gzip', Buffer.from([0x1f, 0x8b])],
  ['zstd', Buffer.from([0x28, 0xb5, 0x2f, 0xfd])],
  ['xz', Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00])],
];

export function detectCompression(head: Buffer): Compression {
  for (const [kind, magic] of MAGIC) if (head.subarray(0, magic.length).equals(magic)) return kind;
  return 'none';
}

/** A decoder as separate input and output streams, and a promise that settles when it has finished. */
interface Decoder {
  input: Writable;
  output: Readable;
  done: Promise<unknown>;
}

function decoder(kind: Exclude<Compression, 'none'>): Decoder {
  if (kind === 'gzip') {
    // Small output chunks: each one dies young, so fewer bytes wait for the next minor GC. 64 KiB chunks
    // measured 25% faster but 6 MiB more peak memory, beyond the agent's 120 MB budget.
    const gunzip = createGunzip({ chunkSize: 32 * 1024 });
    return { input: gunzip, output: gunzip, done: Promise.resolve() };
  }
  // The tool's own pipes, without execa's stream wrappers: this is the hot path.
  const child = spawnTool(kind, ['-dc'], { buffer: { stdout: false, stderr: true }, stripFinalNewline: true });
  return { input: child.stdin!, output: child.stdout!, done: child };
}

/** Reads enough of a stream to tell its compression; `chunks` then replays the stream from its first byte. */
export async function sniffCompression(source: AsyncIterable<Buffer>): Promise<{ kind: Compression; chunks: AsyncIterable<Buffer> }> {
  const it = source[Symbol.asyncIterator]();
  const head = await readAtLeast(it, 6);
  async function* chunks(): AsyncGenerator<Buffer> {
    if (head.length > 0) yield head;
    yield* rest(it);
  }
  return { kind: detectCompression(head), chunks: chunks() };
}

/** A pipeline stage that decodes data of the given compression inside the agent; plain data passes through. */
export function decodeStage(kind: Compression) {
  return async function* decode(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    if (kind === 'none') {
      yield* source;
      return;
    }
    const tool = decoder(kind);
    const feeding = pipeline(Readable.from(source), tool.input);
    feeding.catch(() => undefined);
    tool.done.catch(() => undefined);
    try {
      for await (const chunk of tool.output) yield chunk as Buffer;
      await tool.done;
      await feeding;
    } catch (err) {
      // Download errors pass through the decoder unchanged; anything else is the decoder's verdict.
      if (err instanceof AgentError) throw err;
      throw new InvalidImage(`the image's ${kind} data could not be decompressed: ${errorText(err)}`);
    } finally {
      tool.input.destroy();
      tool.output.destroy();
    }
  };
}
