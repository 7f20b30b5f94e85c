// What both deploy faults do once every node has settled: a node that ended anything but `active` or
// `deploy failed` is a failure outright; each `deploy failed` one is redeployed and must reach `active` (Ironic's
// promise after a fault is a clear failed state from which a redeploy succeeds).
import { setTimeout as sleep } from 'node:timers/promises';
import type { IronicRest } from './ironic-rest.ts';

export interface Settled {
  state: string;
  error: string | null;
  name: string;
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
