// Compressed images on the buffered path: the decoder's stdout is the buffer file itself, so the decoded
// bytes never pass through the agent. Read back through a pipe, pigz's output was slow to come (2 GiB in
// 7.3–7.5 s, where Node's zlib took 3.8–4.6 in-process); written by pigz into tmpfs, the same 2 GiB took
// 5.7–5.8 s against 6.1–6.4 for zlib writing that file from Node. The decoder runs under RLIMIT_FSIZE
// (prlimit), so the kernel stops it at the bytes the buffer may take, however much a stream would decode to.
import { spawn, type ChildProcess } from 'node:child_process';
import { open, stat } from 'node:fs/promises';
import { pipeline } from 'node:stream/promises';
import { AgentError, InvalidImage, ToolError } from '../errors.ts';
import { TooLargeError } from './block-writer.ts';
import { DECODER_TOOL, type Compressed } from './decompress.ts';
import { assertStarted, exitOf, failed, reason, type Exit } from './tool-exit.ts';

/** Decodes `compressed` into `file` (created or truncated), at most `limit` bytes; returns the decoded size. */
export async function decodeToFile(kind: Compressed, compressed: AsyncIterable<Buffer>, file: string, limit: number): Promise<number> {
  const fh = await open(file, 'w');
  let child: ChildProcess;
  let exit: Promise<Exit>;
  try {
    child = spawn('prlimit', [`--fsize=${limit}`, '--', DECODER_TOOL[kind], '-dc'], { stdio: ['pipe', fh.fd, 'pipe'] });
    // Before any await: a decoder that cannot start exits at once, and its exit must not go unseen.
    exit = exitOf(child);
  } finally {
    // The child has its own copy of the descriptor from here on.
    await fh.close();
  }
  // A decoder that dies leaves its stdin broken; the exit status tells the story.
  child.stdin!.on('error', () => undefined);
  try {
    await pipeline(compressed, child.stdin!).catch((err: unknown) => {
      // A download error or a refusal stands; a broken pipe means the decoder stopped, and its exit says why.
      if (err instanceof AgentError) throw err;
    });
    const e = await exit;
    assertStarted(e);
    // prlimit's own status when it cannot execute the decoder: a fault of the ramdisk, not of the image.
    if (e.code === 126 || e.code === 127) throw new ToolError(`${DECODER_TOOL[kind]} could not be started: ${reason(e)}`);
    if (e.signal === 'SIGXFSZ' || /No space left on device/.test(e.stderr)) {
      throw new TooLargeError(`the decompressed image is larger than the ${limit} bytes ${file} can hold`);
    }
    if (failed(e)) throw new InvalidImage(`the image's ${kind} data could not be decompressed: ${reason(e)}`);
    return (await stat(file)).size;
  } finally {
    // Nothing may still be writing the file once this returns: the caller deletes it.
    child.kill();
    await exit;
  }
}
