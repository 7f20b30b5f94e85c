// One in-band inspection (IPA's `inspector.inspect`): collect the inventory, run the collectors, post
// the payload to the callback URL(s), and say what the conductor answered. Nothing here ends the process:
// a failed collector is reported in the payload's `error`, a refused or unanswered post in the result,
// and the caller carries on (lookup when an API URL is known, else serving until powered off).
import { allowlistedNames, lsblkDisks } from '../disk/block-devices.ts';
import type { Config } from '../config/config.ts';
import type { Clock } from '../clock.ts';
import { IronicApi } from '../conductor/ironic-api.ts';
import type { LookupReply } from '../conductor/lookup-reply.ts';
import { hasTool, run } from '../exec.ts';
import type { Logger, LogRing } from '../log.ts';
import type { AgentState } from '../state.ts';
import { postInspection, type CallbackOutcome } from './callback.ts';
import { runCollectors, type Collector } from './collectors/registry.ts';
import { liveRoot, type HostRoot } from './host-root.ts';
import { candidateNames, readInterfaces } from './interfaces.ts';
import {
  collectInventory,
  inventorySummary,
  type Inventory,
  type InventorySources,
  type PartTimes,
} from './inventory.ts';
import { captureLldp } from './lldp-capture.ts';

export interface InspectionDeps {
  config: Config;
  log: Logger;
  /** What `log` wrote lately: the `logs` collector sends it. */
  logRing: LogRing;
  state: AgentState;
  clock: Clock;
  signal?: AbortSignal;
  /** The conductor's API minor version, when an ipa-api-url told it. */
  conductorVersion?: number;
  /** Overrides for tests: another root, recorded lsblk/ipmitool output, another collector table. */
  sources?: Partial<InventorySources>;
  collectors?: Readonly<Record<string, Collector>>;
  /** The command that runs the LLDP helper (tests: one that fails); lldp-capture.ts's own by default. */
  lldpCommand?: readonly string[];
}

export interface InspectionResult {
  outcome: CallbackOutcome;
  /** The node, when the conductor said which one it is. */
  nodeUuid?: string;
  /** The lookup-shaped reply of API ≥ 1.84, with the agent token. */
  lookup?: LookupReply;
}

async function liveSources(config: Config, log: Logger, root: HostRoot): Promise<InventorySources> {
  const biosdevname = (await hasTool('biosdevname'))
    ? async (name: string) => (await run('biosdevname', ['-i', name], { log, okCodes: [4] })).stdout.trim() || null
    : undefined;
  return {
    root,
    lsblk: () => lsblkDisks(log),
    ipmitool: async (args) => (await run('ipmitool', args, { log, timeoutMs: 30_000 })).stdout,
    bootif: config.bootif,
    loops: await allowlistedNames(config.disks.allowlist),
    biosdevname,
  };
}

/** IPA's wait_for_dhcp: until the PXE NIC (or every NIC) has an IPv4 address, polling every 2 s. */
async function waitForDhcp(deps: InspectionDeps, sources: InventorySources): Promise<void> {
  const { dhcpWaitS, dhcpAllInterfaces } = deps.config.inspection;
  const pxeMac = deps.config.bootifMac;
  if (dhcpWaitS === 0 || (!pxeMac && !dhcpAllInterfaces)) return;
  const deadline = deps.clock.now() + dhcpWaitS * 1000;
  for (;;) {
    const nics = await readInterfaces(sources.root, { addresses: sources.addresses });
    const waiting = nics.filter((n) => (dhcpAllInterfaces || n.mac_address === pxeMac) && !n.ipv4_address);
    if (waiting.length === 0 || deps.clock.now() >= deadline) {
      if (waiting.length > 0)
        deps.log.warn({ nics: waiting.map((n) => n.name), waitedS: dhcpWaitS }, 'no IPv4 address from DHCP yet');
      return;
    }
    await deps.clock.sleep(2000, deps.signal);
  }
}

export async function inspect(deps: InspectionDeps): Promise<InspectionResult> {
  const { config, log, state } = deps;
  const root = deps.sources?.root ?? liveRoot;
  const sources: InventorySources = { ...(await liveSources(config, log, root)), ...deps.sources };
  state.update({ phase: 'inspecting', inspection: { phase: 'collecting', at: Date.now() / 1000 } });
  const listen = (names: string[]) =>
    captureLldp(names, { timeoutS: config.inspection.lldpTimeoutS, command: deps.lldpCommand, log });
  if (config.inspection.collectLldp && !sources.lldp) {
    // The deprecated ipa-collect-lldp puts TLVs into the inventory; an interface not listened to gets null.
    const { frames, errors } = await listen(await candidateNames(root));
    if (Object.keys(errors).length > 0) log.warn({ errors }, 'LLDP capture failed');
    sources.lldp = frames;
  }
  let inventory: Promise<Inventory> | undefined;
  let collectionMs: number | undefined;
  const getInventory = () =>
    (inventory ??= (async () => {
      const t0 = performance.now();
      const partsMs: PartTimes = {};
      const inv = await collectInventory(sources, partsMs);
      collectionMs = Math.round(performance.now() - t0);
      log.info({ collectionMs, partsMs, summary: inventorySummary(inv) }, 'hardware inventory collected');
      state.update({
        inspection: { phase: 'collecting', summary: inventorySummary(inv), collectionMs, at: Date.now() / 1000 },
      });
      return inv;
    })());
  const { data, failures } = await runCollectors(
    {
      root,
      log,
      logRing: deps.logRing,
      inventory: getInventory,
      names: config.inspection.collectors,
      bootif: config.bootif,
      captureLldp: listen,
      run: async (file, args) => (await run(file, args, { log, timeoutMs: 60_000 })).stdout,
      waitForDhcp: () => waitForDhcp(deps, sources),
    },
    deps.collectors,
  );
  const summary = inventory ? inventorySummary(await inventory) : undefined;
  state.update({ inspection: { phase: 'posting', summary, collectionMs, at: Date.now() / 1000 } });
  if (config.inspection.callbackUrls.includes('mdns')) {
    const outcome: CallbackOutcome = {
      kind: 'failed',
      reason: 'ipa-inspection-callback-url=mdns: finding the service by mDNS is not supported; give its URL',
      attempts: 0,
    };
    log.error({ outcome }, 'inspection not posted');
    state.update({
      inspection: { phase: 'failed', summary, collectionMs, result: outcome.reason, at: Date.now() / 1000 },
    });
    return { outcome };
  }
  const api = new IronicApi({
    urls: config.inspection.callbackUrls,
    timeoutS: config.lookup.httpRequestTimeoutS,
    clock: deps.clock,
    requestId: config.globalRequestId,
    insecure: config.tls.insecure,
    caFile: config.tls.caFile,
    log,
  });
  let outcome: CallbackOutcome;
  try {
    outcome = await postInspection(
      data,
      { timeoutS: config.inspection.timeoutS, conductorVersion: deps.conductorVersion },
      {
        api,
        clock: deps.clock,
        log,
        signal: deps.signal,
      },
    );
  } finally {
    await api.close();
  }
  const ok = outcome.kind === 'accepted' && failures.length === 0;
  const result =
    outcome.kind === 'accepted'
      ? `HTTP ${outcome.status}, node ${outcome.nodeUuid ?? '(not named)'}${failures.length ? `; ${failures.length} collector(s) failed` : ''}`
      : `${outcome.kind}: ${outcome.reason}`;
  (ok ? log.info.bind(log) : log.error.bind(log))(
    { outcome: outcome.kind, attempts: outcome.attempts, failures, result },
    'inspection posted',
  );
  state.update({ inspection: { phase: ok ? 'done' : 'failed', summary, collectionMs, result, at: Date.now() / 1000 } });
  if (outcome.kind !== 'accepted') return { outcome };
  // As IPA: a collector failure means no node UUID for the lookup that follows. The token of a ≥ 1.84 reply
  // is kept all the same: Ironic created it with that reply, and every later lookup shows only "******".
  return ok ? { outcome, nodeUuid: outcome.nodeUuid, lookup: outcome.lookup } : { outcome, lookup: outcome.lookup };
}

/** The pause before inspecting again after a round whose payload reached no callback URL. */
const ROUND_PAUSE_MS = 30_000;

/**
 * Inspects until a callback URL answers: IPA leaves the process when its attempts are spent, and its
 * supervisor starts it (and the inspection) again, so an Ironic API that is down for a while costs a delay,
 * not the node's inspection. Outcomes that no repetition changes (an answer, a refusal, a setting the agent
 * cannot follow: no attempt made) end it, as does cancellation.
 */
export async function inspectUntilAnswered(deps: InspectionDeps): Promise<InspectionResult> {
  for (;;) {
    const result = await inspect(deps);
    if (result.outcome.kind !== 'failed' || result.outcome.attempts === 0) return result;
    deps.log.warn({ reason: result.outcome.reason }, 'the inspection reached no callback URL; inspecting again');
    await deps.clock.sleep(ROUND_PAUSE_MS, deps.signal);
    // The pause ends early on cancellation; no new round starts then.
    deps.signal?.throwIfAborted();
  }
}
