// The conductor-loss fault: every node deploying at once, one conductor (the one holding more nodes) killed (SIGKILL to its PID namespace's
// init, as a machine that goes down) while its nodes are mid-deploy. Ironic's outcome: once the dead conductor's
// heartbeat is older than [conductor]heartbeat_timeout, the other takes its nodes over (the hash ring drops it and
// the API routes the agents' heartbeats to the survivor); a node it was actively working on goes to `deploy failed`
// ("can't be resumed"), one waiting for the agent's callback carries on. Each node must end `active` or `deploy
// failed`, and a redeploy of each failed one must reach `active`, all on the survivor.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import type { IronicRest } from './ironic-rest.ts';
import { redeployFailed, waitSettled } from './redeploy.ts';

export interface LossOutcome {
  killed: string;
  survivor: string;
  /** Nodes the killed conductor held when it died. */
  orphaned: number;
  /** Seconds from the kill until no node names the dead conductor any more. */
  takeoverS: number;
  activeDirectly: number;
  deployFailed: { name: string; error: string | null }[];
  redeployed: number;
  failures: string[];
}

/** SIGKILL to the init of the PID namespace run.sh started `name` in (stack.sh records "name pid" in RUN/pids). */
async function killConductor(run: string, name: string): Promise<void> {
  const line = (await readFile(join(run, 'pids'), 'utf8')).split('\n').findLast((l) => l.startsWith(`${name} `));
  const pid = Number(line?.split(' ')[1]);
  if (!pid) throw new Error(`no pid recorded for ${name} in ${run}/pids`);
  const children = (await readFile(`/proc/${pid}/task/${pid}/children`, 'utf8')).trim().split(/\s+/).filter(Boolean);
  for (const child of children) process.kill(Number(child), 'SIGKILL');
  process.kill(pid, 'SIGKILL');
}

/** Ironic 39 records a take-over abort in the node's history, not in last_error. */
async function lastHistoryError(ironic: IronicRest, uuid: string): Promise<string | null> {
  const { history } = await ironic.call<{ history: { event: string; severity: string }[] }>(
    'GET',
    `/v1/nodes/${uuid}/history?detail=true`,
  );
  const errors = history.filter((h) => h.severity === 'ERROR');
  return errors.length > 0 ? `(node history) ${errors.at(-1)!.event}` : null;
}

export async function conductorLoss(opts: {
  ironic: IronicRest;
  run: string;
  uuids: string[];
  /** The two conductors: the one holding more nodes mid-deploy is killed. */
  conductors: [string, string];
  deployArgs: (uuid: string) => Record<string, unknown>;
  prepare: (uuid: string) => Promise<void>;
  log: (msg: string) => void;
}): Promise<LossOutcome> {
  const { ironic, uuids, log } = opts;
  let [victim, survivor] = opts.conductors;
  const failures: string[] = [];
  for (const uuid of uuids) await opts.prepare(uuid);
  for (const uuid of uuids) await ironic.provision(uuid, 'active', opts.deployArgs(uuid));
  // mid-deploy: every node has left `available`; the victim is the conductor holding more of those not yet active
  const deadline = Date.now() + 300_000;
  let held: string[] = [];
  for (;;) {
    const nodes = await Promise.all(uuids.map((u) => ironic.node(u)));
    const busy = (c: string) =>
      nodes.filter((n) => n.conductor === c && n.provision_state !== 'active').map((n) => n.uuid);
    if (busy(survivor).length > busy(victim).length) [victim, survivor] = [survivor, victim];
    held = busy(victim);
    const started = nodes.every((n) => n.provision_state !== 'available');
    if (started && held.length > 0) break;
    if (nodes.every((n) => n.provision_state === 'active') || Date.now() > deadline)
      throw new Error('conductor loss: no conductor held a node mid-deploy');
    await sleep(500);
  }
  log(`conductor loss: killing ${victim}, which holds ${held.length} node(s) mid-deploy`);
  await killConductor(opts.run, victim);
  const tKill = Date.now();

  let takeoverS = Number.NaN;
  const settled = await waitSettled({
    ironic,
    uuids,
    fault: 'conductor loss',
    since: tKill,
    after: 'the kill',
    failures,
    record: async (uuid, s) =>
      s.state === 'deploy failed' ? { ...s, error: s.error ?? (await lastHistoryError(ironic, uuid)) } : s,
    eachRound: async () => {
      if (!Number.isNaN(takeoverS)) return;
      const owners = await Promise.all(held.map(async (u) => (await ironic.node(u)).conductor));
      if (owners.every((o) => o === survivor)) takeoverS = (Date.now() - tKill) / 1000;
    },
  });
  const { failed, redeployed } = await redeployFailed({
    ...opts,
    settled,
    fault: 'conductor loss',
    failures,
    checkActive: (n, s) => (n.conductor === survivor ? null : `${s.name} redeployed by ${n.conductor}`),
  });
  return {
    killed: victim,
    survivor,
    orphaned: held.length,
    takeoverS,
    activeDirectly: settled.size - failed.length,
    deployFailed: failed.map(([, s]) => ({ name: s.name, error: s.error })),
    redeployed,
    failures,
  };
}
