// Inspection when Ironic gave only `ipa-inspection-callback-url` (managed inspection without fast track):
// inspect (again, until a callback URL answers), then serve the API without lookup or heartbeat until the
// conductor powers the machine off, as IPA does. Nothing that goes wrong here ends the process.
import type { Agent } from '../agent.ts';
import type { Config } from '../config/config.ts';
import { realClock } from '../clock.ts';
import { waitForNicMacs } from '../conductor/nics.ts';
import type { Logger } from '../log.ts';
import { inspectUntilAnswered } from './flow.ts';
import { enableVlanInterfaces, liveVlanSetup } from './vlans.ts';

export async function inspectWithoutConductor(agent: Agent, config: Config, log: Logger): Promise<void> {
  const { state, logRing } = agent.services;
  state.update({ phase: 'waiting for network' });
  const macs = await waitForNicMacs(config.lookup.nicWaitS, realClock);
  if (macs.length === 0)
    log.warn({ waitedS: config.lookup.nicWaitS }, 'no network interface with a MAC address; inspecting anyway');
  await enableVlanInterfaces(liveVlanSetup(config, log));
  try {
    const result = await inspectUntilAnswered({ config, log, logRing, state, clock: realClock });
    log.info({ node: result.nodeUuid, outcome: result.outcome.kind }, 'inspection done; no conductor to look up');
  } catch (err) {
    log.error({ err: (err as Error).message }, 'inspection failed');
    state.update({ inspection: { phase: 'failed', result: (err as Error).message, at: Date.now() / 1000 } });
  }
  const server = await agent.listen();
  log.info({ port: server.port }, 'agent API listening');
  state.update({ phase: 'inspected; waiting to be powered off' });
}
