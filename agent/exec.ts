// The one way the agent runs external tools: execa with logging, a timeout, and errors that name the
// command, exit code and stderr, so a failed sgdisk reads as such in `command_error.details`; streaming tools
// (decoders, dd) by Node's spawn (`spawnMortal`). Every tool that may write runs `mortal`.
import { spawn, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { existsSync } from 'node:fs';
import { setTimeout as sleep } from 'node:timers/promises';
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

/**
 * A streaming tool whose pipes the caller wires to other processes and descriptors (a decoder into dd, a shell
 * over the device): Node's own spawn of the `mortal` argv, since execa's subprocess would reject a promise nobody
 * awaits when such a tool fails; the caller reads how it ended (image/sinks/tool-process.ts `exitOf`).
 */
export function spawnMortal(file: string, args: readonly string[], opts: SpawnOptions): ChildProcess {
  return spawn(...mortal(file, args), opts);
}

/** A long-running tool whose stdio the caller wires itself (qemu-img, the console's shell); see `mortal`. */
export function spawnTool(file: string, args: readonly string[], opts: Options = {}): ResultPromise {
  return execa(file, args, { buffer: false, ...opts });
}

export async function hasTool(file: string): Promise<boolean> {
  const r = await execa('sh', ['-c', `command -v ${file}`], { reject: false });
  return r.exitCode === 0;
}

export interface StreamedRun {
  /** The exit status, or null when a signal ended the program. */
  exitCode: number | null;
  signal: string | null;
  /** The last lines of stderr (at most 20), for an error's details. */
  stderrTail: string[];
}

/**
 * A program that may run long and talk much (an operator's step): `input` on its stdin, each line of its
 * stdout and stderr handed to `onLine` as it comes, nothing buffered. It runs in its own process group, so
 * that `signal` stops it and whatever it started: SIGTERM to the group, SIGKILL after `graceMs`.
 */
export async function runStreamed(
  file: string,
  args: readonly string[],
  opts: {
    input: string;
    signal: AbortSignal;
    cwd?: string;
    /** Added to the agent's environment. */
    env?: Record<string, string>;
    onLine(stream: 'stdout' | 'stderr', line: string): void;
    graceMs?: number;
  },
): Promise<StreamedRun> {
  const child = execa(...mortal(file, args), {
    input: opts.input,
    cwd: opts.cwd,
    env: opts.env,
    detached: true,
    buffer: false,
    reject: false,
    stripFinalNewline: true,
    encoding: 'utf8',
  });
  const stderrTail: string[] = [];
  const lines = async (stream: 'stdout' | 'stderr') => {
    const source = stream === 'stdout' ? child.stdout : child.stderr;
    let rest = '';
    const emit = (line: string) => {
      opts.onLine(stream, line);
      if (stream === 'stderr') {
        stderrTail.push(line.slice(0, 4096));
        if (stderrTail.length > 20) stderrTail.shift();
      }
    };
    for await (const chunk of source) {
      const parts = (rest + String(chunk)).split('\n');
      rest = parts.pop() ?? '';
      for (const p of parts) emit(p);
      // a program that never ends its line must not grow this without bound
      if (rest.length > 65_536) {
        emit(rest);
        rest = '';
      }
    }
    if (rest !== '') emit(rest);
  };
  const group = (sig: NodeJS.Signals) => {
    try {
      if (child.pid) process.kill(-child.pid, sig);
    } catch {
      // the group is gone already
    }
  };
  const grace = opts.graceMs ?? 5000;
  let killer: NodeJS.Timeout | undefined;
  const stop = () => {
    group('SIGTERM');
    killer = setTimeout(() => group('SIGKILL'), grace);
  };
  // What the program left in its group (a helper it backgrounded, a child that ignores SIGTERM) must not
  // outlive the step: once the leader is gone, SIGTERM, then SIGKILL after the grace. Started on the leader's
  // exit, not when its pipes close, since a helper may hold them open.
  let reaping: Promise<void> | undefined;
  const reap = () => {
    reaping ??= reapGroup(child.pid, grace);
    return reaping;
  };
  child.nodeChildProcess.once('exit', () => void reap());
  if (opts.signal.aborted) stop();
  else opts.signal.addEventListener('abort', stop, { once: true });
  try {
    const [result] = await Promise.all([child, lines('stdout'), lines('stderr')]);
    if (result.failed && result.exitCode === undefined && !result.signal) {
      const code = (result.cause as NodeJS.ErrnoException | undefined)?.code;
      throw new ToolError(`${commandLine(file, args)} could not be started${code ? ` (${code})` : ''}`);
    }
    if (notExecuted(result.exitCode, stderrTail.join('\n'))) {
      throw new ToolError(`${commandLine(file, args)} failed (not installed or not executable)`);
    }
    return { exitCode: result.exitCode ?? null, signal: result.signal ?? null, stderrTail };
  } finally {
    opts.signal.removeEventListener('abort', stop);
    await reap();
    if (killer) clearTimeout(killer);
  }
}

/** Whether process group `pgid` still has a member. */
function groupAlive(pgid: number): boolean {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

/**
 * Ends what is left of process group `pgid` after its leader exited: SIGTERM, then SIGKILL to what is still
 * there after `graceMs`. Returns as soon as the group is empty. The group id cannot be taken by another group
 * while a member lives, so it is checked before each signal.
 */
async function reapGroup(pgid: number | undefined, graceMs: number): Promise<void> {
  if (!pgid || !groupAlive(pgid)) return;
  const signal = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pgid, sig);
    } catch {
      // ESRCH: the group emptied in between
    }
  };
  const until = async (deadline: number) => {
    while (groupAlive(pgid) && Date.now() < deadline) await sleep(Math.min(50, Math.max(1, deadline - Date.now())));
  };
  signal('SIGTERM');
  await until(Date.now() + graceMs);
  if (!groupAlive(pgid)) return;
  signal('SIGKILL');
  // a SIGKILLed process is gone once its parent (init, for what the leader left) has reaped it
  await until(Date.now() + 2000);
}
