// The one way the agent starts processes, with execa as the engine: `run` for a tool that runs to its end
// (logged, with a timeout, and an error that names the command, exit code and stderr, so a failed sgdisk reads
// as such in `command_error.details`), `startTool` for one whose pipes the caller wires (decoders, dd,
// qemu-img, a shell), `runStreamed` for an operator's program, line by line. Every tool that may write runs
// `mortal`. No other module imports node:child_process or execa (test/project/layering.test.ts).
import { existsSync } from 'node:fs';
import type { Readable, Writable } from 'node:stream';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { ToolError } from './errors.ts';
import type { Logger } from './log.ts';

export interface RunOptions {
  input?: string | Buffer;
  timeoutMs?: number;
  /** Exit codes that are not failures (e.g. `sgdisk -v` returns non-zero on warnings). */
  okCodes?: number[];
  env?: Record<string, string>;
  log?: Logger;
  /** Stops the tool (SIGTERM, then SIGKILL) when aborted: long tools (burn-in) end with their command. */
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

/**
 * setpriv's own failure to execute the tool (exit 127 when not found, 126 when found but not executable, and
 * its message), as opposed to the tool's exit: what to say about it, or null.
 */
function notExecuted(exitCode: number | null | undefined, stderr: string): string | null {
  const m = exitCode === 126 || exitCode === 127 ? /^setpriv: failed to execute (\S+): (.*)$/m.exec(stderr) : null;
  return m ? `${m[1]} could not be started: ${m[2]}` : null;
}

/** How long a tool asked to stop (a kill, a timeout, a cancel) may take before it is killed. */
const KILL_AFTER_MS = 2000;

export async function run(file: string, args: readonly string[], opts: RunOptions = {}): Promise<RunResult> {
  const line = commandLine(file, args);
  opts.log?.debug({ cmd: line }, 'exec');
  const result = await execa(...(opts.query ? ([file, [...args]] as [string, string[]]) : mortal(file, args)), {
    input: opts.input,
    timeout: opts.timeoutMs ?? 300_000,
    reject: false,
    env: opts.env,
    ...(opts.signal ? { cancelSignal: opts.signal } : {}),
    // a tool that ignores the SIGTERM of a timeout or a cancel is killed, as startTool's are
    forceKillAfterDelay: KILL_AFTER_MS,
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

/** How a started tool ended. */
export interface Exit {
  /** The exit status, or null when a signal ended it. */
  code: number | null;
  signal: NodeJS.Signals | null;
  /** The start of its stderr (about 4000 characters), trimmed. */
  stderr: string;
  /** The tool never ran (not installed, not executable): a fault of the ramdisk, not of its input. */
  notStarted?: string;
}

export const failed = (e: Exit) => e.code !== 0;
export const reason = (e: Exit) =>
  e.stderr.slice(0, 2000) || (e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`);

/** Throws a ToolError for a tool that never ran, so that it is not mistaken for a verdict on its input. */
export function assertStarted(...exits: Exit[]): void {
  for (const e of exits) if (e.notStarted) throw new ToolError(e.notStarted);
}

export interface StartOptions {
  /** A pipe the caller writes (the default), nothing, the agent's own, or another tool's stdout handed over. */
  stdin?: 'pipe' | 'ignore' | 'inherit' | Readable;
  /**
   * A pipe the caller reads (the default), nothing, the agent's own, or a descriptor the tool writes itself.
   * The caller attaches its reader (`on('data')`, `for await`, or hands the pipe to another tool) in the same
   * tick as startTool: execa sets a pipe nobody reads flowing one turn of the event loop later
   * (lib/io/contents.js, `resumeStream`), and what the tool wrote before a later reader is lost.
   */
  stdout?: 'pipe' | 'ignore' | 'inherit' | number;
  /** Collected into `Exit.stderr` (the default), or the agent's own (a shell on the console). */
  stderr?: 'pipe' | 'inherit';
  /** Added to the agent's environment. */
  env?: Record<string, string>;
  /** Stops the tool (SIGTERM, then SIGKILL) when aborted. */
  signal?: AbortSignal;
}

/**
 * A started tool: its pipes, as asked for (null otherwise), and how it ended. `stdout` is read from the tick
 * the tool was started in, or its first bytes are lost (`StartOptions.stdout`).
 */
export interface Tool {
  readonly stdin: Writable | null;
  readonly stdout: Readable | null;
  /** Settles once the tool has exited and its pipes are closed; never rejects. */
  readonly exit: Promise<Exit>;
  /**
   * SIGTERM by default; after a SIGTERM, SIGKILL follows in `KILL_AFTER_MS` if the tool is still there. Any
   * other signal is sent alone.
   */
  kill(signal?: NodeJS.Signals): void;
}

/**
 * Starts `file` `mortal`ly with its pipes wired as `opts` says: the bytes go from descriptor to descriptor, not
 * through the agent, where the caller hands over a descriptor or another tool's pipe (execa passes a single
 * stream or descriptor on to the kernel as it is). Nothing is buffered but the start of stderr; the caller
 * reads what it asked to read.
 */
export function startTool(file: string, args: readonly string[], opts: StartOptions = {}): Tool {
  const child = execa(...mortal(file, args), {
    stdin: opts.stdin ?? 'pipe',
    // execa hands any descriptor to the kernel as it is (lib/stdio/handle.js); its types name only 1 and 2
    stdout: (opts.stdout ?? 'pipe') as 'pipe',
    stderr: opts.stderr ?? 'pipe',
    env: opts.env,
    buffer: false,
    reject: false,
    forceKillAfterDelay: KILL_AFTER_MS,
    ...(opts.signal ? { cancelSignal: opts.signal } : {}),
  });
  let stderr = '';
  child.stderr?.setEncoding('utf8').on('data', (text: string) => {
    if (stderr.length < 4000) stderr += text;
  });
  const exit = child.then((r): Exit => {
    if (r.failed && r.exitCode === undefined && !r.signal) {
      const cause = r.cause instanceof Error ? r.cause.message : String(r.shortMessage);
      return { code: null, signal: null, stderr, notStarted: `${file} could not be started: ${cause}` };
    }
    const code = r.exitCode ?? null;
    const e = { code, signal: (r.signal as NodeJS.Signals | undefined) ?? null, stderr: stderr.trim() };
    const notStarted = notExecuted(code, stderr);
    return notStarted ? { ...e, notStarted } : e;
  });
  return {
    stdin: child.stdin,
    stdout: child.stdout,
    exit,
    kill: (signal) => void child.kill(signal),
  };
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
