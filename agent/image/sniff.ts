// Which compression a downloaded image came in, told by its first bytes, and the Debian tool that decodes it
// (sinks/decoder-pipe.ts onto the device, sinks/file-decoder.ts into the buffer file). gzip goes through pigz rather
// than Node's zlib: in-process, the agent's peak memory grew with the image, through pigz it stays flat
// (docs/decisions.md, docs/performance.md).
import { afterHead, readAtLeast } from './peek.ts';

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
export async function sniffCompression(
  source: AsyncIterable<Buffer>,
): Promise<{ kind: Compression; chunks: AsyncIterable<Buffer> }> {
  const it = source[Symbol.asyncIterator]();
  const head = await readAtLeast(it, 6);
  return { kind: detectCompression(head), chunks: afterHead(it, async () => head) };
}
