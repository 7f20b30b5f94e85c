// The shape of a command and what it may use. An extension is a table of commands; the registry is a
// table of extensions. Each command parses its params once into a typed object, then runs.
import type { Config } from '../config/config.ts';
import type { AgentServices } from '../services.ts';

export interface CommandContext extends AgentServices {
  /**
   * Aborted when the command is cancelled (the agent forgets its commands, or stops). A command that writes
   * stops its writers and tools on it, waits for them to exit, and leaves the disk as after a failed write.
   */
  signal: AbortSignal;
  /** While an async command runs, whatever it reports here is its `command_result`. */
  progress(report: unknown): void;
}

export type Params = Record<string, unknown>;

export interface CommandSpec<P = unknown> {
  mode: 'sync' | 'async';
  /**
   * Throws an InvalidContentError subclass (HTTP 400, nothing recorded) on bad params. The config is there
   * for params whose validity depends on the agent's settings (an md5 checksum when md5 is disabled).
   */
  parse(params: Params, config: Config): P;
  run(params: P, ctx: CommandContext): unknown;
}

export function command<P>(spec: CommandSpec<P>): CommandSpec<P> {
  return spec;
}

// Commands are heterogeneous in P; the registry only ever calls run(parse(x)).
// biome-ignore lint/suspicious/noExplicitAny: one table holds commands whose arguments differ in type
export type Extension = Readonly<Record<string, CommandSpec<any>>>;

export type CommandStatus = 'RUNNING' | 'SUCCEEDED' | 'FAILED' | 'CLEAN_VERSION_MISMATCH';
