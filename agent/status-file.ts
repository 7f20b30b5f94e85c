// Mirrors the agent's state and command list into a JSON file, rewritten (atomically) on change, so
// that the serial console — a separate process that must survive an agent crash — can show them.
import { renameSync, writeFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import type { CommandExecutor } from './commands/executor.ts';
import type { CrashReport } from './last-words.ts';
import type { AgentState } from './state.ts';

export interface StatusFile {
  written_at: number;
  status: AgentState['status'];
  commands: {
    id: string;
    name: string;
    status: string;
    started_at: number;
    finished_at?: number;
    result: unknown;
    error: unknown;
  }[];
  /** Written by a process on its way out after an uncaught exception, with its agent token; read by the next one. */
  crash?: CrashReport;
  token?: string;
  /** The auto-TLS key and certificate, beside the token: the conductor accepts no other after a restart. */
  tls?: { key: string; cert: string };
}

export function statusDocument(state: AgentState, executor: CommandExecutor): StatusFile {
  return {
    written_at: Date.now() / 1000,
    status: state.status,
    commands: executor.list().map((r) => ({
      id: r.id,
      name: `${r.extension}.${r.commandName.replace(/^[^.]+\./, '')}`,
      status: r.status,
      started_at: r.startedAt / 1000,
      finished_at: r.finishedAt ? r.finishedAt / 1000 : undefined,
      result: r.result,
      error: r.error,
    })),
  };
}

/** For a process that is about to exit: nothing asynchronous would still happen. Readable by root only (the token). */
export function writeStatusSync(path: string, doc: StatusFile): void {
  writeFileSync(`${path}.tmp`, JSON.stringify(doc), { mode: 0o600 });
  renameSync(`${path}.tmp`, path);
}

export function mirrorStatus(path: string, state: AgentState, executor: CommandExecutor): void {
  let pending: NodeJS.Timeout | undefined;
  let writing = Promise.resolve();
  const write = () => {
    pending = undefined;
    const doc = statusDocument(state, executor);
    writing = writing
      .then(() => writeFile(`${path}.tmp`, JSON.stringify(doc)))
      .then(() => rename(`${path}.tmp`, path))
      .catch(() => undefined);
  };
  // Progress reports can arrive many times a second; the console redraws about once a second anyway.
  const schedule = () => {
    if (pending === undefined) pending = setTimeout(write, 250);
  };
  state.on('change', schedule);
  executor.on('change', schedule);
  write();
}
