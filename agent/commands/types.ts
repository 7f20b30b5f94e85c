// The shape of a command and what it may use. An extension is a table of commands; the registry is a
// table of extensions. Each command parses its params once into a typed object, then runs.
import type { Config } from '../config/config.ts';
import type { TaskContext } from '../services.ts';

/** A command runs with the services, its cancel switch and its progress report (services.ts). */
export type CommandContext = TaskContext;

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
