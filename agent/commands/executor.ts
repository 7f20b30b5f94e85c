// Runs `extension.method` commands one at a time and keeps every result, in order, for the process
// lifetime (until a simulated reboot forgets them). The check order and result shapes are IPA's.
import { randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import {
  AgentIsBusy,
  CommandExecutionError,
  InvalidCommandError,
  InvalidContentError,
  RequestedObjectNotFoundError,
  VersionMismatch,
  toCommandError,
  type CommandErrorBody,
} from '../errors.ts';
import { FifoLock } from '../lock.ts';
import type { AgentServices } from '../services.ts';
import { boundStepEcho } from './step-echo.ts';
import type { CommandSpec, CommandStatus, Extension, Params } from './types.ts';

export interface CommandResultJson {
  id: string;
  command_name: string;
  command_status: CommandStatus;
  command_error: CommandErrorBody | null;
  command_result: unknown;
}

export class CommandRecord {
  readonly id = randomUUID();
  status: CommandStatus = 'RUNNING';
  error: CommandErrorBody | null = null;
  result: unknown = null;
  readonly startedAt = Date.now();
  finishedAt?: number;
  readonly done: Promise<void>;
  private resolveDone!: () => void;

  constructor(
    public commandName: string,
    readonly extension: string,
  ) {
    this.done = new Promise((resolve) => (this.resolveDone = resolve));
  }

  finish(status: CommandStatus, result: unknown, error: CommandErrorBody | null): void {
    this.status = status;
    this.result = result;
    this.error = error;
    this.finishedAt = Date.now();
    this.resolveDone();
  }

  toJSON(): CommandResultJson {
    return {
      id: this.id,
      command_name: this.commandName,
      command_status: this.status,
      command_error: this.error,
      command_result: this.result,
    };
  }
}

/** IPA wraps string results: sync `{result: s}`, async `{result: "<method>: s"}`; null stays null. */
function normaliseResult(value: unknown, method: string, mode: 'sync' | 'async'): unknown {
  if (value === undefined || value === null) return null;
  if (typeof value === 'string') return { result: mode === 'async' ? `${method}: ${value}` : value };
  if (Buffer.isBuffer(value)) return { result: value.toString('utf8') };
  return value;
}

export interface ExecutorEvents {
  /** An async command ended (either way): the conductor link heartbeats early on it. */
  'async-done': [CommandRecord];
  change: [CommandRecord];
}

export class CommandExecutor extends EventEmitter<ExecutorEvents> {
  private history: CommandRecord[] = [];
  /** Sync commands hold it for their whole run, async ones until they are recorded. */
  private readonly lock = new FifoLock();
  /** Maps, not the plain objects: a name like `constructor` or `__proto__` must find nothing. */
  private readonly registry: ReadonlyMap<string, ReadonlyMap<string, CommandSpec>>;
  /** The running async command's cancel switch and the promise that settles once it has wound down. */
  private running: { record: CommandRecord; abort: AbortController; ended: Promise<void> } | null = null;
  /** Commands forgotten by a reset that are still winding down: the agent stays busy until they are gone. */
  private readonly draining = new Set<CommandRecord>();

  constructor(
    registry: Readonly<Record<string, Extension>>,
    private readonly services: AgentServices,
  ) {
    super();
    this.registry = new Map(Object.entries(registry).map(([name, ext]) => [name, new Map(Object.entries(ext))]));
  }

  list(): readonly CommandRecord[] {
    return this.history;
  }

  find(id: string): CommandRecord | undefined {
    return this.history.find((r) => r.id === id);
  }

  current(): CommandRecord | undefined {
    return this.history.at(-1);
  }

  /**
   * A simulated reboot, or the conductor forgot us: the new "boot" starts with an empty history. A command
   * still running is cancelled first and waited for (its writers and tools gone, its disk cleared as after
   * any failed write); until then every new command is refused as busy, even once the history is empty.
   */
  async reset(why = 'the agent forgot its commands'): Promise<void> {
    const running = this.running;
    this.history = [];
    if (!running) return;
    this.draining.add(running.record);
    try {
      await this.cancelRunning(running, why);
    } finally {
      this.draining.delete(running.record);
    }
  }

  /** Cancels the running async command, if any, and waits until it has wound down; it stays in the history. */
  async cancel(why: string): Promise<CommandRecord | undefined> {
    const running = this.running;
    if (!running) return undefined;
    await this.cancelRunning(running, why);
    return running.record;
  }

  private async cancelRunning(running: NonNullable<CommandExecutor['running']>, why: string): Promise<void> {
    this.services.log.warn(
      { command: running.record.commandName, id: running.record.id, why },
      'cancelling the running command',
    );
    // Why it stopped before its end (a reset, the agent stopping), as IPA's wire class.
    running.abort.abort(new CommandExecutionError(why));
    await running.ended;
  }

  /**
   * Validates and starts a command. Throws an AgentError for the HTTP-level refusals (bad name, busy,
   * unknown extension or method, bad params); anything a command itself raises becomes a FAILED result.
   */
  async submit(name: string, params: Params): Promise<CommandRecord> {
    return this.lock.hold(async () => {
      const dot = name.indexOf('.');
      if (dot < 0) throw new InvalidCommandError('Command name must be of the form <extension>.<name>');
      const extName = name.slice(0, dot);
      const method = name.slice(dot + 1);

      const last = this.current();
      if (last?.status === 'RUNNING') throw new AgentIsBusy(last.commandName);
      const [winding] = this.draining;
      if (winding) throw new AgentIsBusy(winding.commandName);

      const extension = this.registry.get(extName);
      if (!extension) throw new RequestedObjectNotFoundError('Extension', extName);
      const spec = extension.get(method);
      if (!spec) throw new InvalidCommandError(`Unknown command: ${method}`);

      if (spec.mode === 'sync') return this.runSync(spec, name, extName, method, params);
      return this.startAsync(spec, extName, method, params);
    });
  }

  private async runSync(
    spec: CommandSpec,
    fullName: string,
    extName: string,
    method: string,
    params: Params,
  ): Promise<CommandRecord> {
    const record = new CommandRecord(method, extName);
    const ctx = { ...this.services, signal: new AbortController().signal, progress: () => {} };
    try {
      const parsed = spec.parse(params, this.services.config);
      const value = await spec.run(parsed, ctx);
      record.finish('SUCCEEDED', normaliseResult(value, method, 'sync'), null);
    } catch (err) {
      if (err instanceof InvalidContentError) throw err;
      // IPA records a failed sync command under its dotted name; Ironic reads it that way.
      record.commandName = fullName;
      record.finish('FAILED', null, toCommandError(err, 'keep-type'));
      this.services.log.warn({ command: fullName, err: record.error }, 'command failed');
    }
    this.history.push(record);
    this.emit('change', record);
    return record;
  }

  private startAsync(spec: CommandSpec, extName: string, method: string, params: Params): CommandRecord {
    const parsed = spec.parse(params, this.services.config);
    const record = new CommandRecord(method, extName);
    this.history.push(record);
    const abort = new AbortController();
    const ctx = {
      ...this.services,
      signal: abort.signal,
      progress: (report: unknown) => {
        if (record.status !== 'RUNNING') return;
        record.result = report;
        this.emit('change', record);
      },
    };
    const log = this.services.log;
    log.info({ command: `${extName}.${method}`, id: record.id }, 'command started');
    const ended = (async () => {
      try {
        const value = await spec.run(parsed, ctx);
        // A command that ignored its cancellation must not be reported as a success.
        abort.signal.throwIfAborted();
        record.finish('SUCCEEDED', boundStepEcho(normaliseResult(value, method, 'async'), method), null);
        log.info({ command: `${extName}.${method}`, id: record.id }, 'command succeeded');
      } catch (err) {
        const status = err instanceof VersionMismatch ? 'CLEAN_VERSION_MISMATCH' : 'FAILED';
        const cause = abort.signal.aborted ? abort.signal.reason : err;
        record.finish(status, null, toCommandError(cause, 'wrap'));
        log.warn({ command: `${extName}.${method}`, id: record.id, err: record.error }, 'command failed');
      } finally {
        if (this.running?.record === record) this.running = null;
      }
      this.emit('change', record);
      // A forgotten command's end is nobody's news.
      if (!this.draining.has(record) && this.history.includes(record)) this.emit('async-done', record);
    })();
    this.running = { record, abort, ended };
    this.emit('change', record);
    return record;
  }
}
