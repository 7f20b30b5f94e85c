// The long-lived services every part of the agent may use, built once in agent.ts (and by test harnesses).
// It sits at the top of agent/ so that image/, disk/ and commands/ all point at it and none points up.
import type { Clock } from './clock.ts';
import type { Config } from './config/config.ts';
import type { HostActions } from './host/host-actions.ts';
import type { Logger } from './log.ts';
import type { DeviceGuard } from './safety/device-guard.ts';
import type { AgentState } from './state.ts';

export interface AgentServices {
  config: Config;
  log: Logger;
  state: AgentState;
  guard: DeviceGuard;
  host: HostActions;
  /** Every retry loop's sleeps and deadlines; tests hand in virtual time. */
  clock: Clock;
}
