// What both deploy faults do after the fault: wait until every node has settled, then a node that ended anything
// but `active` or `deploy failed` is a failure outright; each `deploy failed` one is redeployed and must reach
// `active` (Ironic's promise after a fault is a clear failed state from which a redeploy succeeds).
import { setTimeout as sleep } from 'node:timers/promises';
import type { IronicRest } from './ironic-rest.ts';

export interface Settled {
  state: string;
  error: string | null;
  name: string;
}

/**
 * Polls the nodes each second until every one is `active` with nothing pending or in a failed or error state,
 * for at most 900 s from `since` (then a failure line, `<fault>: N node(s) not settled 900 s after <after>`).
 * `record` turns a settled node into what the fault keeps of it; `eachRound` runs after every round of polls.
 */
export async function waitSettled<S extends Settled>(opts: {
  ironic: IronicRest;
  uuids: readonly string[];
  fault: string;
  since: number;
  after: string;
  failures: string[];
  record: (uuid: string, settled: Settled) => S | Promise<S>;
  eachRound?: () => Promise<void>;
}): Promise<Map<string, S>> {
  const { ironic, uuids } = opts;
  const settled = new Map<string, S>();
  while (settled.size < uuids.length) {
    if (Date.now() - opts.since > 900_000) {
      opts.failures.push(`${opts.fault}: ${uuids.length - settled.size} node(s) not settled 900 s after ${opts.after}`);
      break;
    }
    for (const uuid of uuids) {
      if (settled.has(uuid)) continue;
      const n = await ironic.node(uuid);
      if (n.provision_state === 'active' && n.target_provision_state === null)
        settled.set(uuid, await opts.record(uuid, { state: 'active', error: null, name: n.name }));
      else if (/failed$|^error$/.test(n.provision_state))
        settled.set(uuid, await opts.record(uuid, { state: n.provision_state, error: n.last_error, name: n.name }));
    }
    await opts.eachRound?.();
    await sleep(1000);
  }
  return settled;
}

export async function redeployFailed<S extends Settled>(opts: {
  ironic: IronicRest;
  settled: Map<string, S>;
  /** Names the fault in failure lines and the log. */
  fault: string;
  deployArgs: (uuid: string) => Record<string, unknown>;
  prepare: (uuid: string) => Promise<void>;
  log: (msg: string) => void;
  failures: string[];
  /** A further check of a node redeployed to `active` (a failure line, or null). */
  checkActive?: (node: { conductor?: string | null }, s: S) => string | null;
}): Promise<{ failed: [string, S][]; redeployed: number }> {
  const { ironic, settled, fault, failures } = opts;
  const failed = [...settled.entries()].filter(([, s]) => s.state !== 'active');
  for (const [, s] of failed)
    if (s.state !== 'deploy failed') failures.push(`${fault}: ${s.name} ended ${s.state}: ${s.error}`);
  opts.log(`${fault}: ${settled.size - failed.length} active directly, ${failed.length} failed; redeploying those`);
  let redeployed = 0;
  for (const [uuid] of failed) {
    await opts.prepare(uuid);
    await ironic.provision(uuid, 'active', opts.deployArgs(uuid));
  }
  for (const [uuid, s] of failed) {
    const end = Date.now() + 600_000;
    for (;;) {
      const n = await ironic.node(uuid);
      if (n.provision_state === 'active' && n.target_provision_state === null) {
        const wrong = opts.checkActive?.(n, s);
        if (wrong) failures.push(`${fault}: ${wrong}`);
        redeployed++;
        break;
      }
      if (/failed$|^error$/.test(n.provision_state) || Date.now() > end) {
        failures.push(`${fault}: redeploy of ${s.name} ended ${n.provision_state}: ${n.last_error}`);
        break;
      }
      await sleep(1000);
    }
  }
  return { failed, redeployed };
}
