// Compressed images on the buffered path: the decoder's stdout is the buffer file itself, so the decoded
// bytes never pass through the agent: reading pigz's output back through a pipe was slower than letting it
// write the file (docs/performance.md, "Figures from code comments"). The decoder runs under RLIMIT_FSIZE (prlimit), so
// the kernel stops it at the bytes the buffer may take, however much a
// stream would decode to.
import { open, type FileHandle } from 'node:fs/promises';
import { ImageWriteError, ToolError, errorText } from '../../errors.ts';
import { assertStarted, failed, reason, type Tool } from '../../exec.ts';
import { DECODER_TOOL, type Compressed } from '../sniff.ts';
import { decodeFailure, feed, startDecoder } from './tool-process.ts';

/** Decodes `compressed` into `file` (created or truncated), at most `limit` bytes. */
export async function decodeToFile(
  kind: Compressed,
  compressed: AsyncIterable<Buffer>,
  file: string,
  limit: number,
): Promise<void> {
  const tool = DECODER_TOOL[kind];
  let fh: FileHandle;
  try {
    fh = await open(file, 'w');
  } catch (err) {
    throw new ImageWriteError(`cannot open the buffer file ${file}: ${errorText(err)}`);
  }
  let child: Tool | undefined;
  try {
    child = startDecoder(kind, fh.fd, limit);
    await feed(compressed, child.stdin!, child.exit);
    const e = await child.exit;
    assertStarted(e);
    // prlimit's own status when it cannot execute the decoder: a fault of the ramdisk, not of the image.
    if (e.code === 126 || e.code === 127) throw new ToolError(`${tool} could not be started: ${reason(e)}`);
    if (e.signal === 'SIGXFSZ' || /No space left on device/.test(e.stderr)) {
      throw new ImageWriteError(`the decompressed image is larger than the ${limit} bytes ${file} can hold`, {
        tooLarge: true,
      });
    }
    // Unable to write the file: not a verdict on the image.
    if (/write error|Input\/output error|Disk quota/i.test(e.stderr)) {
      throw new ImageWriteError(`decoding the ${kind} image into ${file} failed: ${reason(e)}`);
    }
    if (failed(e)) throw decodeFailure(kind, e, file);
  } finally {
    // Nothing may still write the file once this returns: the caller deletes it.
    child?.kill();
    await child?.exit;
    await fh.close();
  }
}
