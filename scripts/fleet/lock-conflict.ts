// The lock-conflict fault: heartbeats refused with 409 NodeLocked while another task holds the node's lock.
// Ironic 39 answers a heartbeat 409 only when the node has no agent_url yet and is reserved (manager.py
// `heartbeat`); otherwise a heartbeat on a locked node is accepted and skipped. That is the state after in-band
// inspection: the API hands the agent its token first, then the conductor processes the inventory holding the
// node's lock ("processing the data may take significant time", ramdisk.py). So every node is inspected at once
// (inspect_interface=agent, unmanaged boot: the harness boots each node's agent anew with Ironic's inspection
// callback, as an operator's PXE set-up would) under an inspection rule whose `api-call` action registers the node
// with an inventory service that takes LOCK_HOLD_S to answer: a real conductor task holding the lock, during
// which the agent, token in hand, looks up and heartbeats. The outcome Ironic defines: the heartbeats get 409, the
// agent retries 5-10 s later (IPA's HeartbeatConflictError), the first heartbeat after the rule's call is accepted
// and records agent_url, and nothing is lost: every node goes on to clean, deploy to `active` and undeploy.
import { createServer, type Server } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import { heartbeats, since, type Heartbeats } from './heartbeats.ts';
import type { FleetNode, IronicRest } from './ironic-rest.ts';

/** How long the inventory service takes to answer each node: the lock is held at least this long. */
export const LOCK_HOLD_S = 25;
const HOOK = { host: '10.47.0.10', port: 8099 };

export interface LockOutcome {
  nodes: number;
  /** Calls the inventory service received (one per inspected node), and how long each was held. */
  hookCalls: number;
  holdS: number;
  /** The heartbeats and lookups of the fault's window, from the API's log and the agents'. */
  beats: Heartbeats;
  /** Agents that met at least one 409, and the most any one met. */
  agentsConflicted: number;
  maxPerAgent: number;
  /** Seconds from an agent's boot to its node in `manageable`: median, worst. */
  inspectS: [number, number];
  /** Wall time of the deploy and undeploy that follow. */
  deployS: number;
  undeployS: number;
  failures: string[];
}

/** The inventory service: answers each GET after LOCK_HOLD_S, and counts them. */
async function slowInventory(): Promise<{ server: Server; calls: () => number }> {
  let calls = 0;
  const server = createServer((req, res) => {
    calls++;
    req.resume();
    const t = setTimeout(() => res.end('registered\n'), LOCK_HOLD_S * 1000);
    res.on('close', () => clearTimeout(t));
  });
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(HOOK.port, HOOK.host, ok);
  });
  return { server, calls: () => calls };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? Number.NaN;

export async function lockConflict(opts: {
  ironic: IronicRest;
  run: string;
  uuids: string[];
  /** Node `uuid` powers off: its agent process ends. */
  powerOff: (uuid: string) => Promise<void>;
  /** Boots node `uuid` into the inspection ramdisk: its agent started anew with Ironic's inspection callback. */
  bootInspection: (uuid: string) => Promise<void>;
  /** Drives the nodes to `target` with `verb` as the waves do (deploys with their config drive): the failures. */
  drive: (uuids: string[], verb: string, target: string) => Promise<{ failures: string[]; wallMs: number }>;
  log: (msg: string) => void;
}): Promise<LockOutcome> {
  const { ironic, uuids, log } = opts;
  const failures: string[] = [];
  const hook = await slowInventory();
  let ruleUuid: string | undefined;
  try {
    ({ uuid: ruleUuid } = await ironic.call<{ uuid: string }>('POST', '/v1/inspection_rules', {
      description: 'fleet: register every inspected node with the inventory service',
      phase: 'main',
      priority: 50,
      conditions: [],
      actions: [
        {
          op: 'api-call',
          args: { url: `http://${HOOK.host}:${HOOK.port}/register/{node.uuid}`, timeout: 120, retries: 0 },
        },
      ],
    }));
    const before = await heartbeats(opts.run);
    failures.push(...(await opts.drive(uuids, 'manage', 'manageable')).failures);
    // Inspection begins with a power-off that wipes the token: the running agents go with it, or one would look up
    // again before its node reboots, take the new token and leave the inspection ramdisk only "******".
    await Promise.all(uuids.map((u) => opts.powerOff(u)));
    for (const uuid of uuids) await ironic.provision(uuid, 'inspect');
    // each node's ramdisk boots once Ironic has powered it on for inspection (`inspect wait`)
    const booted = new Map<string, number>();
    const boots: Promise<void>[] = [];
    const bootDeadline = Date.now() + 300_000;
    while (booted.size < uuids.length && Date.now() < bootDeadline) {
      for (const n of await ironic.nodes()) {
        if (!uuids.includes(n.uuid) || booted.has(n.uuid)) continue;
        if (n.provision_state === 'inspect wait') {
          booted.set(n.uuid, Date.now());
          boots.push(opts.bootInspection(n.uuid));
        } else if (n.provision_state === 'inspect failed') {
          booted.set(n.uuid, Date.now());
          failures.push(`lock conflict: ${n.name} inspect failed before its ramdisk booted: ${n.last_error}`);
        }
      }
      await sleep(500);
    }
    await Promise.all(boots);
    if (booted.size < uuids.length)
      failures.push(`lock conflict: ${uuids.length - booted.size} node(s) never reached inspect wait`);
    log(
      `lock conflict: ${boots.length} agent(s) booted for inspection; the inventory service holds each for ${LOCK_HOLD_S} s`,
    );

    // manageable again, then agent_url recorded: a heartbeat got through after the lock was let go
    const inspected = new Map<string, number>();
    const settleDeadline = Date.now() + 900_000;
    const pending = () => uuids.filter((u) => booted.has(u) && !inspected.has(u));
    while (pending().length > 0 && Date.now() < settleDeadline) {
      for (const uuid of pending()) {
        const n: FleetNode = await ironic.node(uuid);
        if (n.provision_state === 'inspect failed') {
          inspected.set(uuid, Number.NaN);
          failures.push(`lock conflict: ${n.name} inspect failed: ${n.last_error}`);
        } else if (
          n.provision_state === 'manageable' &&
          n.target_provision_state === null &&
          n.driver_internal_info.agent_url
        )
          inspected.set(uuid, (Date.now() - booted.get(uuid)!) / 1000);
      }
      await sleep(1000);
    }
    for (const uuid of pending()) failures.push(`lock conflict: ${uuid} not manageable with an agent_url in 900 s`);
    const beats = since(await heartbeats(opts.run), before);
    const per = Object.values(beats.conflictsByAgent);
    log(
      `lock conflict: heartbeats answered 409 ${beats.byStatus['409'] ?? 0} time(s); agents logged ${beats.agentConflicts} conflict(s)`,
    );
    if (!beats.byStatus['409'] || beats.agentConflicts === 0)
      failures.push('lock conflict: no heartbeat met a locked node (the fault was not injected)');
    if (hook.calls() < booted.size)
      failures.push(
        `lock conflict: the inventory service was called ${hook.calls()} time(s) for ${booted.size} node(s)`,
      );

    // nothing lost: the same agents clean, deploy and undeploy
    failures.push(...(await opts.drive(uuids, 'provide', 'available')).failures);
    const deployed = await opts.drive(uuids, 'active', 'active');
    failures.push(...deployed.failures.map((f) => `lock conflict: deploy after the conflicts: ${f}`));
    const undeployed = await opts.drive(uuids, 'deleted', 'available');
    failures.push(...undeployed.failures);
    const times = [...inspected.values()].filter((s) => !Number.isNaN(s));
    return {
      nodes: uuids.length,
      hookCalls: hook.calls(),
      holdS: LOCK_HOLD_S,
      beats,
      agentsConflicted: per.filter((n) => n > 0).length,
      maxPerAgent: Math.max(0, ...per),
      inspectS: [median(times), Math.max(0, ...times)],
      deployS: deployed.wallMs / 1000,
      undeployS: undeployed.wallMs / 1000,
      failures,
    };
  } finally {
    if (ruleUuid) await ironic.call('DELETE', `/v1/inspection_rules/${ruleUuid}`).catch(() => undefined);
    hook.server.closeAllConnections();
    await new Promise((r) => hook.server.close(r));
  }
}
