// On-the-fly decompression of a downloaded image, chosen by the first bytes, through Debian's tools.
// gzip goes through pigz rather than Node's zlib: in-process, every 32 KiB of output was a fresh Buffer,
// and the dead ones piled up in V8's old generation until its first full collection, so the agent's peak
// memory grew with the image (118 MiB at 4 GiB, over its 120 MB budget). On the stream path pigz keeps it
// flat (98 MiB) and still beats `gzip -dc`, since its own threads read, write and check the CRC beside the inflating one.
import { Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { AgentError, InvalidImage, errorText } from '../errors.ts';
import { spawnTool } from '../exec.ts';
import { readAtLeast, rest } from './peek.ts';

export type Compression = 'gzip' | 'zstd' | 'xz' | 'none';
export type Compressed = Exclude<Compression, 'none'>;

const MAGIC: [Compression, Buffer][] = [
  ['gzip', Buffer.from([0x1f, 0x8b])],
  ['zstd', Buffer.from([0x28, 0xb5, 0x2f, 0xfd])],
  ['xz', Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00])],
];

/** The tool that decodes each compression; every one takes `-dc` to decode stdin to stdout. */
export const DECODER_TOOL: Record<Compressed, string> = { gzip: 'pigz', zstd: 'zstd', xz: 'xz' };

export function detectCompression(head: Buffer): Compression {
  for (const [kind, magic] of MAGIC) if (head.subarray(0, magic.length).equals(magic)) return kind;
  return 'none';
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

/**
 * A pipeline stage that decodes data of the given compression with its tool, whose output comes back through
 * the agent (the buffered path; the stream path uses device-decoder.ts); plain data passes through.
 */
export function decodeStage(kind: Compression) {
  return async function* decode(source: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
    if (kind === 'none') {
      yield* source;
      return;
    }
    // The tool's own pipes, without execa's stream wrappers: this is the hot path.
    const tool = spawnTool(DECODER_TOOL[kind], ['-dc'], { buffer: { stdout: false, stderr: true }, stripFinalNewline: true });
    const feeding = pipeline(Readable.from(source), tool.stdin!);
    feeding.catch(() => undefined);
    tool.catch(() => undefined);
    try {
      for await (const chunk of tool.stdout!) yield chunk as Buffer;
      await tool;
      await feeding;
    } catch (err) {
      // Download errors pass through the decoder unchanged; anything else is the decoder's verdict.
      if (err instanceof AgentError) throw err;
      throw new InvalidImage(`the image's ${kind} data could not be decompressed: ${errorText(err)}`);
    } finally {
      tool.stdin!.destroy();
      tool.stdout!.destroy();
    }
  };
}
