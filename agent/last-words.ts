// What happens when an exception escapes everything (a bug, or a library asserting, as undici 7 did on a
// paused parser). The process cannot be trusted to go on, so it records what it knows, synchronously
// (nothing queued would be written), and exits non-zero for the ramdisk's supervisor to start it again:
// the stack goes to the log, the console (stderr) and the status file, and the command that was running
// is marked FAILED there. The next start reads that record back and says it restarted, and why.
import { appendFileSync, readFileSync } from 'node:fs';
import type { CommandExecutor } from './commands/executor.ts';
import { CommandExecutionError } from './errors.ts';
import type { Logger } from './log.ts';
import type { AgentState, CrashReport } from './state.ts';
import { statusDocument, writeStatusSync, type StatusFile } from './status-file.ts';

export type { CrashReport };

/** EX_SOFTWARE: an internal error, for whoever reads the exit status. */
export const CRASH_EXIT_CODE = 70;

export function installLastWords(deps: {
  log: Logger;
  /** Writes out the log file's queued lines (AgentLog.flushSync). */
  flushLog: () => void;
  state: AgentState;
  executor: CommandExecutor;
  statusFile?: string;
}): void {
  const { log, flushLog, state, executor, statusFile } = deps;
  let dying = false;
  // An unhandled rejection arrives here too (Node's default --unhandled-rejections=throw).
  process.on('uncaughtException', (err, origin) => {
    if (dying) return;
    dying = true;
    const stack = (err instanceof Error ? err.stack : undefined) ?? String(err);
    const report: CrashReport = {
      at: Date.now() / 1000,
      error: err instanceof Error ? `${err.name}: ${err.message}` : String(err),
      stack,
    };
    const running = executor.current();
    if (running?.status === 'RUNNING') {
      report.command = { id: running.id, name: running.commandName };
      const why = new CommandExecutionError(
        `the agent process failed while running this command and restarts: ${report.error}`,
      );
      running.finish('FAILED', null, why.toCommandError());
    }
    // Each step on its own: a failing one (a full disk, a closed stream) must not keep the others from happening.
    const attempt = (step: () => void) => {
      try {
        step();
      } catch {
        // nothing left to report it to
      }
    };
    attempt(() =>
      log.fatal(
        { origin, command: report.command, stack },
        `uncaught exception, exiting for a restart: ${report.error}`,
      ),
    );
    attempt(flushLog);
    attempt(() =>
      appendFileSync(
        2,
        `ironic-node-agent: uncaught exception${report.command ? ` during ${report.command.name}` : ''}, exiting for a restart:\n${stack}\n`,
      ),
    );
    // The token goes along so that the next run can still heartbeat: the conductor hands it out only once.
    const token = state.agentToken ?? undefined;
    const tls = state.autoTls ?? undefined;
    if (statusFile)
      attempt(() => writeStatusSync(statusFile, { ...statusDocument(state, executor), crash: report, token, tls }));
    process.exit(CRASH_EXIT_CODE);
  });
}

/**
 * The crash recorded in the status file by the previous run of the agent, if it ended in one, with its token and
 * certificate.
 */
export function previousCrash(
  statusFile: string,
): (Pick<StatusFile, 'token' | 'tls'> & { crash: CrashReport }) | undefined {
  try {
    const doc = JSON.parse(readFileSync(statusFile, 'utf8')) as StatusFile;
    return doc.crash ? { crash: doc.crash, token: doc.token, tls: doc.tls } : undefined;
  } catch {
    return undefined;
  }
}

/** One line for the console and the log about the crash this run follows. */
export function restartLine(crash: CrashReport): string {
  const when = new Date(crash.at * 1000).toISOString();
  const command = crash.command ? `; ${crash.command.name} (${crash.command.id}) was marked FAILED` : '';
  return `restarted after an uncaught exception at ${when}: ${crash.error}${command}`;
}
