// One logger for the agent (pino). Lines go to stdout, to an optional file, and into a ring buffer
// that belongs to that logger; `log.collect_system_logs` reads it, so logs exist even with no disk.
import { Writable } from 'node:stream';
import pino, { type Logger } from 'pino';

export type { Logger };

export class LogRing extends Writable {
  private readonly lines: string[] = [];

  constructor(private readonly capacity = 5000) {
    super({ decodeStrings: false });
  }

  override _write(chunk: string | Buffer, _enc: BufferEncoding, done: () => void): void {
    for (const line of chunk.toString().split('\n')) {
      if (line === '') continue;
      this.lines.push(line);
      if (this.lines.length > this.capacity) this.lines.shift();
    }
    done();
  }

  tail(n = this.capacity): string[] {
    return this.lines.slice(-n);
  }
}

/** A logger and the ring of its recent lines, made together: the ring holds what this logger wrote. */
export interface AgentLog {
  log: Logger;
  ring: LogRing;
  /**
   * Writes out what the log file has queued: the file is written in the background, and a process about to exit
   * (a signal, an uncaught exception) must flush it itself or lose its last lines.
   */
  flushSync: () => void;
}

export function createLogger(opts: { debug: boolean; file?: string; quiet?: boolean }): AgentLog {
  const level = opts.debug ? 'debug' : 'info';
  const ring = new LogRing();
  const streams: pino.StreamEntry[] = [{ level, stream: ring }];
  if (!opts.quiet) streams.push({ level, stream: process.stdout });
  const file = opts.file ? pino.destination({ dest: opts.file, append: true, sync: false }) : undefined;
  if (file) streams.push({ level, stream: file });
  return {
    log: pino({ level, base: { svc: 'ironic-node-agent' } }, pino.multistream(streams)),
    ring,
    flushSync: () => file?.flushSync(),
  };
}

/** A silent logger for unit tests of modules that take one. */
export const nullLogger: Logger = pino({ level: 'silent' });
