// How a decoding tool (or the dd behind it) ended, read from node:child_process: its exit status and the
// start of its stderr, and whether it ran at all.
import type { ChildProcess } from 'node:child_process';
import { ToolError } from '../errors.ts';

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
  stderr: string;
  /** The tool never ran (not installed, not executable): a fault of the ramdisk, not of the image. */
  notStarted?: string;
}

export function exitOf(child: ChildProcess): Promise<Exit> {
  let stderr = '';
  child.stderr!.setEncoding('utf8').on('data', (text: string) => {
    if (stderr.length < 4000) stderr += text;
  });
  return new Promise((resolve) => {
    child.once('error', (err) => resolve({ code: null, signal: null, stderr, notStarted: `${child.spawnfile} could not be started: ${err.message}` }));
    child.once('close', (code, signal) => resolve({ code, signal, stderr: stderr.trim() }));
  });
}

/** Throws a ToolError for a tool that never ran, so that it is not mistaken for bad image data. */
export function assertStarted(...exits: Exit[]): void {
  for (const e of exits) if (e.notStarted) throw new ToolError(e.notStarted);
}

export const failed = (e: Exit) => e.code !== 0;
export const reason = (e: Exit) => e.stderr.slice(0, 2000) || (e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`);
