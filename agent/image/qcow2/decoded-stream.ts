// A qcow2 image inside gzip, zstd or xz: decoded by the same tools as every compressed image (sniff.ts),
// but read back by the agent, because the qcow2 reader has to see the image's bytes to place them.
import { assertStarted, failed } from '../../exec.ts';
import { decodeFailure, feed, startDecoder } from '../sinks/tool-process.ts';
import type { Compressed } from '../sniff.ts';

export async function* decodedStream(kind: Compressed, compressed: AsyncIterable<Buffer>): AsyncGenerator<Buffer> {
  const child = startDecoder(kind, 'pipe');
  const exit = child.exit;
  const fed = feed(compressed, child.stdin!, exit);
  // A failed download leaves the decoder waiting for input: stop it, so that its output ends too.
  fed.catch(() => child.kill());
  try {
    for await (const chunk of child.stdout!) yield chunk as Buffer;
    await fed;
    const e = await exit;
    assertStarted(e);
    if (failed(e)) throw decodeFailure(kind, e, 'the qcow2 reader');
  } finally {
    child.kill();
    await exit;
  }
}
