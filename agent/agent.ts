// Builds the agent from a Config: services, command engine and API. main.ts runs it as a process;
// tests run it in-process on loopback.
import { createApp } from './api/app.ts';
import { realClock, type Clock } from './clock.ts';
import { startServer, type RunningServer, type TlsMaterial } from './api/server.ts';
import { CommandExecutor } from './commands/executor.ts';
import { commandExtensions } from './commands/registry.ts';
import type { AgentServices } from './services.ts';
import type { Extension } from './commands/types.ts';
import type { Config } from './config/config.ts';
import { HostActions } from './host/host-actions.ts';
import { loadCatalogue } from './steps/plugins.ts';
import { LogRing, type Logger } from './log.ts';
import { DeviceGuard } from './safety/device-guard.ts';
import { AgentState } from './state.ts';
import { AGENT_VERSION } from './version.ts';

export interface Agent {
  services: AgentServices;
  executor: CommandExecutor;
  /** Starts serving the API; with `tls`, over HTTPS. */
  listen(tls?: TlsMaterial): Promise<RunningServer>;
}

export interface AgentOptions {
  /** The commands served; the built-in ones and the loaded steps by default. */
  registry?: Readonly<Record<string, Extension>>;
  clock?: Clock;
  /** The ring `log` writes into (log.ts createLogger); without one the archive's agent.log is empty. */
  logRing?: LogRing;
}

export function createAgent(config: Config, log: Logger, opts: AgentOptions = {}): Agent {
  const { registry, clock = realClock, logRing = new LogRing() } = opts;
  const state = new AgentState(AGENT_VERSION, config.token.agentToken ?? null);
  const services: AgentServices = {
    config,
    log,
    logRing,
    state,
    guard: new DeviceGuard(config.disks.allowlist),
    host: new HostActions(config.hostActions, log),
    clock,
  };
  // The built-in steps and the operator's plugins; loading starts now, and the API serves once it is done.
  const catalogue = loadCatalogue(config.hardwareManagersDir, log, config.injectFilesPriority);
  const executor = new CommandExecutor(registry ?? commandExtensions(catalogue), services);
  // A real power cycle ends the process and its memory; a simulated one must forget as much (the arrays may come
  // back under other numbers, as after a real reboot).
  services.host.on('simulated-restart', () => {
    state.raidRootVolumes = new Map();
  });
  if (config.standalone) {
    // Without a conductor link (which boots again itself), a simulated power action forgets token and
    // history; a command still running is cancelled and waited for, and the agent is busy until then.
    services.host.on('simulated-restart', (action) => {
      log.info({ action }, 'simulated power action: forgetting token and history');
      state.setToken(config.token.agentToken ?? null);
      void executor.reset(`the agent was simulated to ${action}`);
    });
  }
  const app = createApp({
    executor,
    state,
    log,
    tokenPolicy: { standalone: config.standalone, requireOnGet: config.token.requireOnGet },
    clock,
  });
  return {
    services,
    executor,
    listen: async (tls) => {
      // A plugin left out says why in the command history too (the `hardware.get_managers` record).
      if (!registry && (await catalogue).failures.length > 0) await executor.submit('hardware.get_managers', {});
      return startServer(app, config.listen.host, config.listen.port, tls);
    },
  };
}
