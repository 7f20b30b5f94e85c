// A decoding tool (started by the runner, exec.ts `startTool`): starting it, feeding its stdin, and its failure
// as a verdict on the image or not.
import type { Writable } from 'node:stream';
import { ImageWriteError, InvalidImage } from '../../errors.ts';
import { type Exit, failed, reason, startTool, type Tool } from '../../exec.ts';
import { DECODER_TOOL, type Compressed } from '../sniff.ts';

/**
 * Starts the decoder for `kind` (`pigz`, `zstd` or `xz`, `-dc`): compressed bytes in on its stdin, decoded bytes
 * out to `stdout`, a pipe the caller reads or hands on, or a descriptor the decoder writes itself. With
 * `fileSizeLimit` it runs under prlimit's RLIMIT_FSIZE, so that the kernel stops it there, without a core file
 * (SIGXFSZ dumps core by default). Messages in English, which the callers' checks (ENOSPC) read.
 */
export function startDecoder(kind: Compressed, stdout: 'pipe' | number, fileSizeLimit?: number): Tool {
  const tool = DECODER_TOOL[kind];
  const [file, args] =
    fileSizeLimit === undefined
      ? [tool, ['-dc']]
      : ['prlimit', [`--fsize=${fileSizeLimit}`, '--core=0', '--', tool, '-dc']];
  return startTool(file, args, { stdout, env: { LC_ALL: 'C' } });
}

/**
 * The error for a decoder that failed: a verdict on the image's data, unless a signal ended it (the OOM
 * killer, say), which says nothing about the image.
 */
export function decodeFailure(kind: string, e: Exit, target: string): Error {
  if (e.signal) return new ImageWriteError(`the ${kind} decoder was killed by ${e.signal} while writing ${target}`);
  return new InvalidImage(`the image's ${kind} data could not be decompressed: ${reason(e)}`);
}

/** Resolves once `stream` emits `event`, or fails or closes (whichever comes first). */
function settled(stream: Writable, event: 'drain' | 'finish'): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      for (const e of [event, 'error', 'close']) stream.off(e, done);
      resolve();
    };
    for (const e of [event, 'error', 'close']) stream.on(e, done);
  });
}

/**
 * Writes `source` into a tool's stdin and ends it. A tool may stop reading before the end: pigz exits,
 * successfully, at the end of the gzip data, however much follows it (zeros that pad an image, say). When
 * the tool (its `exit`) succeeded, the rest of `source` is read all the same, so that every downloaded byte
 * reaches the checksum, which runs in `source`; when it failed, reading stops and its exit tells why.
 * Errors of `source` (a failed download) are thrown; the tool's broken stdin is not an error here.
 */
export async function feed(source: AsyncIterable<Buffer>, stdin: Writable, exit: Promise<Exit>): Promise<void> {
  stdin.on('error', () => undefined);
  const open = () => !stdin.destroyed && !stdin.errored;
  for await (const chunk of source) {
    if (open()) {
      if (!stdin.write(chunk) && open()) await settled(stdin, 'drain');
    } else if (failed(await exit)) {
      return;
    }
  }
  if (!open()) return;
  stdin.end();
  await settled(stdin, 'finish');
}
