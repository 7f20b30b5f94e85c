// How the fleet's heartbeats went, from both ends: the API's answers (its request log: `POST /v1/heartbeat/<uuid>
// - <status>`) and the agents' own account (their log lines "heartbeat conflict", a 409 while the node is locked,
// retried 5-10 s later, and "heartbeat failed").
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface Heartbeats {
  /** Answer count per HTTP status, e.g. { 202: 310, 409: 4 }. */
  byStatus: Record<string, number>;
  agentConflicts: number;
  agentFailures: number;
}

export async function heartbeats(run: string): Promise<Heartbeats> {
  const api = await readFile(join(run, 'fleet-api/log/ironic-api.log'), 'utf8').catch(() => '');
  const byStatus: Record<string, number> = {};
  for (const m of api.matchAll(/ POST \/v1\/heartbeat\/\S+ - (\d{3}) /g)) byStatus[m[1]!] = (byStatus[m[1]!] ?? 0) + 1;
  let agentConflicts = 0;
  let agentFailures = 0;
  for (const name of await readdir(join(run, 'agents')).catch(() => [] as string[])) {
    const text = await readFile(join(run, 'agents', name, 'agent.log'), 'utf8').catch(() => '');
    agentConflicts += text.split('"msg":"heartbeat conflict"').length - 1;
    agentFailures += text.split('"msg":"heartbeat failed"').length - 1;
  }
  return { byStatus, agentConflicts, agentFailures };
}
