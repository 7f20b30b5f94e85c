// A decoding tool (or the dd behind it) run with node:child_process: feeding its stdin, and how it ended
// (its exit status, the start of its stderr, whether it ran at all).
import type { ChildProcess, StdioPipe } from 'node:child_process';
import type { Stream, Writable } from 'node:stream';
import { ImageWriteError, InvalidImage, ToolError } from '../../errors.ts';
import { spawnMortal } from '../../exec.ts';
import { DECODER_TOOL, type Compressed } from '../sniff.ts';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  /** The tool never ran (not installed, not executable): a fault of the ramdisk, not of the image. */
  notStarted?: string;
}

/**
 * Starts the decoder for `kind` (`pigz`, `zstd` or `xz`, `-dc`): compressed bytes in on its stdin, decoded bytes
 * out to `stdout`, a pipe the caller reads or a descriptor or stream it writes itself. With `fileSizeLimit` it
 * runs under prlimit's RLIMIT_FSIZE, so that the kernel stops it there, without a core file (SIGXFSZ dumps core
 * by default). Messages in English, which the callers' checks (ENOSPC) read.
 */
export function spawnDecoder(
  kind: Compressed,
  stdout: StdioPipe | number | Stream,
  fileSizeLimit?: number,
): ChildProcess {
  const tool = DECODER_TOOL[kind];
  const [file, args] =
    fileSizeLimit === undefined
      ? [tool, ['-dc']]
      : ['prlimit', [`--fsize=${fileSizeLimit}`, '--core=0', '--', tool, '-dc']];
  return spawnMortal(file, args, { stdio: ['pipe', stdout, 'pipe'], env: { ...process.env, LC_ALL: 'C' } });
}

export function exitOf(child: ChildProcess): Promise<Exit> {
  let stderr = '';
  // A spawn that failed outright (EMFILE, say) leaves no stderr stream; the `error` event says why.
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    if (stderr.length < 4000) stderr += text;
  });
  return new Promise((resolve) => {
    child.once('error', (err) =>
      resolve({
        code: null,
        signal: null,
        stderr,
        notStarted: `${child.spawnfile} could not be started: ${err.message}`,
      }),
    );
    child.once('close', (code, signal) => {
      // Run through setpriv (exec.ts `mortal`): its own failure to execute the tool means the same.
      const unexecuted = code === 127 ? /^setpriv: failed to execute (\S+): (.*)$/m.exec(stderr) : null;
      const notStarted = unexecuted ? { notStarted: `${unexecuted[1]} could not be started: ${unexecuted[2]}` } : {};
      resolve({ code, signal, stderr: stderr.trim(), ...notStarted });
    });
  });
}

/** Throws a ToolError for a tool that never ran, so that it is not mistaken for bad image data. */
export function assertStarted(...exits: Exit[]): void {
  for (const e of exits) if (e.notStarted) throw new ToolError(e.notStarted);
}

export const failed = (e: Exit) => e.code !== 0;
export const reason = (e: Exit) =>
  e.stderr.slice(0, 2000) || (e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`);

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
