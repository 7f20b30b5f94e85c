// Waits for a node to reach a provision state, failing at once (with Ironic's last_error and the logs
// that explain it) when it lands in another stable state instead.
import type { Baremetal, NodeView } from './baremetal.ts';

const STABLE_FAILURES = new Set([
  'deploy failed',
  'clean failed',
  'error',
  'inspect failed',
  'rescue failed',
  'service failed',
  'unrescue failed',
]);

export interface WaitContext {
  /** Text appended to a failure: the agent's and the conductor's last log lines. */
  explain(): Promise<string>;
}

export async function waitForState(
  bm: Baremetal,
  uuid: string,
  target: string,
  ctx: WaitContext,
  timeoutMs = 240_000,
): Promise<NodeView> {
  const t0 = Date.now();
  const deadline = t0 + timeoutMs;
  const seen: string[] = [];
  for (;;) {
    const node = await bm.node(uuid);
    const label = `${node.provision_state}${node.target_provision_state ? ` -> ${node.target_provision_state}` : ''}`;
    if (seen.at(-1)?.endsWith(` ${label}`) !== true) seen.push(`+${((Date.now() - t0) / 1000).toFixed(1)}s ${label}`);
    // a failed state keeps the target it failed to reach ("deploy failed" -> "active")
    const settled = node.target_provision_state === null || STABLE_FAILURES.has(target);
    if (node.provision_state === target && settled) return node;
    if (STABLE_FAILURES.has(node.provision_state) && node.provision_state !== target) {
      throw new Error(
        `node went to "${node.provision_state}" instead of "${target}"\n` +
          `last_error: ${node.last_error}\nstates: ${seen.join(' | ')}\n${await ctx.explain()}`,
      );
    }
    if (Date.now() > deadline) {
      throw new Error(
        `node did not reach "${target}" within ${timeoutMs / 1000} s (now "${label}")\n` +
          `last_error: ${node.last_error}\nstates: ${seen.join(' | ')}\n${await ctx.explain()}`,
      );
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}
