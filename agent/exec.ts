// The one way the agent runs external tools: execa with logging, a timeout, and errors that name the
// command, exit code and stderr, so a failed sgdisk reads as such in `command_error.details`.
import { existsSync } from 'node:fs';
import { execa, type Options, type ResultPromise } from 'execa';
import { ToolError } from './errors.ts';
import type { Logger } from './log.ts';

export interface RunOptions {
  input?: string | Buffer;
  timeoutMs?: number;
  /** Exit codes that are not failures (e.g. `sgdisk -v` returns non-zero on warnings). */
  okCodes?: number[];
  env?: Record<string, string>;
  log?: Logger;
  /** Stops the tool (SIGTERM) when aborted: long tools (burn-in) end with their command. */
  signal?: AbortSignal;
  /**
   * A short query that changes nothing (lsblk), run without setpriv (see `mortal`): one exec less, which is
   * a large part of the inventory's time under emulation, and a left-over query harms nothing.
   */
  query?: boolean;
}

export interface RunResult {
  stdout: string;
  stderr: string;
  exitCode: number;
}

export function commandLine(file: string, args: readonly string[]): string {
  return [file, ...args].map((a) => (/^[\w@%+=:,./-]+$/.test(a) ? a : JSON.stringify(a))).join(' ');
}

/**
 * The argv that runs `file` so that it cannot outlive the agent: setpriv sets the kernel's parent-death
 * signal (SIGKILL) and execs the tool, which keeps it through its own execs (prlimit → qemu-img). A tool
 * left behind by a killed agent would go on writing a disk nobody deploys any more.
 */
export function mortal(file: string, args: readonly string[]): [string, string[]] {
  return [SETPRIV, ['--pdeathsig', 'KILL', '--', file, ...args]];
}

/** By its path where it is one, so that a tool missing from PATH is reported as that tool, not setpriv. */
const SETPRIV =
  ['/usr/bin/setpriv', '/bin/setpriv', '/usr/sbin/setpriv', '/sbin/setpriv'].find((p) => existsSync(p)) ?? 'setpriv';

/** setpriv's own failure to execute the tool (exit 127 and its message), as opposed to the tool's exit. */
function notExecuted(exitCode: number | undefined, stderr: string): boolean {
  return exitCode === 127 && /^setpriv: failed to execute/m.test(stderr);
}

export async function run(file: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  const line = commandLine(file, args);
  opts.log?.debug({ cmd: line }, 'exec');
  const result = await execa(...(opts.query ? ([file, [...args]] as [string, string[]]) : mortal(file, args)), {
    input: opts.input,
    timeout: opts.timeoutMs ?? 300_000,
    reject: false,
    env: opts.env,
    ...(opts.signal ? { cancelSignal: opts.signal } : {}),
    stripFinalNewline: true,
    encoding: 'utf8',
  });
  const exitCode = result.exitCode ?? -1;
  if (result.failed && (result.exitCode === undefined || !(opts.okCodes ?? []).includes(exitCode))) {
    const why = result.timedOut
      ? 'timed out'
      : result.isCanceled
        ? 'cancelled'
        : (result.cause as NodeJS.ErrnoException | undefined)?.code === 'ENOENT' ||
            notExecuted(result.exitCode, String(result.stderr ?? ''))
          ? 'not installed'
          : null;
    const stderr = String(result.stderr ?? '')
      .trim()
      .slice(0, 2000);
    throw new ToolError(
      `${line} failed (${why ?? `exit code ${exitCode}`})${stderr ? `: ${stderr}` : ''}`,
      why ? null : exitCode,
    );
  }
  return { stdout: String(result.stdout ?? ''), stderr: String(result.stderr ?? ''), exitCode };
}

/** A long-running tool whose stdio the caller wires itself (qemu-img, the console's shell); see `mortal`. */
export function spawnTool(file: string, args: readonly string[], opts: Options = {}): ResultPromise {
  return execa(file, args, { buffer: false, ...opts });
}

export async function hasTool(file: string): Promise<boolean> {
  const r = await execa('sh', ['-c', `command -v ${file}`], { reject: false });
  return r.exitCode === 0;
}
