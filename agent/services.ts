// The long-lived services every part of the agent may use, built once in agent.ts (and by test harnesses).
// It sits at the top of agent/ so that image/, disk/ and commands/ all point at it and none points up.
import type { Clock } from './clock.ts';
import type { Config } from './config/config.ts';
import type { HostActions } from './host/host-actions.ts';
import type { Logger, LogRing } from './log.ts';
import type { DeviceGuard } from './safety/device-guard.ts';
import type { AgentState } from './state.ts';

export interface AgentServices {
  config: Config;
  log: Logger;
  /** The recent lines `log` wrote, for the system logs archive (host/system-logs.ts). */
  logRing: LogRing;
  state: AgentState;
  guard: DeviceGuard;
  host: HostActions;
  /** Every retry loop's sleeps and deadlines; tests hand in virtual time. */
  clock: Clock;
}

/**
 * What a running command hands the work it starts: the services, plus the command's cancel switch and its
 * progress report. Commands (agent/commands/), steps (agent/steps/) and the work below them share this shape.
 */
export interface TaskContext extends AgentServices {
  /**
   * Aborted when the command is cancelled (the agent forgets its commands, or stops). Work that writes stops
   * its writers and tools on it, waits for them to exit, and leaves the disk as after a failed write.
   */
  signal: AbortSignal;
  /** While an async command runs, whatever it reports here is its `command_result`. */
  progress(report: unknown): void;
}
