// How the fleet's heartbeats went, from both ends: the API's answers (its request log: `POST /v1/heartbeat/<uuid>
// - <status>`, and the lookups' `GET /v1/lookup… - <status>`) and the agents' own account (their log lines
// "heartbeat conflict", a 409 while the node is locked, retried 5-10 s later, and "heartbeat failed"). A fault
// takes two readings and subtracts them (`since`) to count what happened in its own window.
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface Heartbeats {
  /** Answer count per HTTP status, e.g. { 202: 310, 409: 4 }. */
  byStatus: Record<string, number>;
  /** The lookups' answers per HTTP status. */
  lookups: Record<string, number>;
  agentConflicts: number;
  agentFailures: number;
  /** "heartbeat conflict" lines per agent (aNN). */
  conflictsByAgent: Record<string, number>;
}

/** Occurrences of each log message ("msg") per agent, from the agents' JSON log files under RUN/agents. */
export async function agentMessages(run: string, msgs: string[]): Promise<Record<string, Record<string, number>>> {
  const out: Record<string, Record<string, number>> = {};
  for (const name of await readdir(join(run, 'agents')).catch(() => [] as string[])) {
    const text = await readFile(join(run, 'agents', name, 'agent.log'), 'utf8').catch(() => '');
    out[name] = Object.fromEntries(msgs.map((m) => [m, text.split(`"msg":${JSON.stringify(m)}`).length - 1]));
  }
  return out;
}

export async function heartbeats(run: string): Promise<Heartbeats> {
  const api = await readFile(join(run, 'fleet-api/log/ironic-api.log'), 'utf8').catch(() => '');
  const byStatus: Record<string, number> = {};
  for (const m of api.matchAll(/ POST \/v1\/heartbeat\/\S+ - (\d{3}) /g)) byStatus[m[1]!] = (byStatus[m[1]!] ?? 0) + 1;
  const lookups: Record<string, number> = {};
  for (const m of api.matchAll(/ GET \/v1\/lookup\S* - (\d{3}) /g)) lookups[m[1]!] = (lookups[m[1]!] ?? 0) + 1;
  const logs = await agentMessages(run, ['heartbeat conflict', 'heartbeat failed']);
  const conflictsByAgent = Object.fromEntries(Object.entries(logs).map(([a, c]) => [a, c['heartbeat conflict']!]));
  const sum = (m: string) => Object.values(logs).reduce((n, c) => n + c[m]!, 0);
  return {
    byStatus,
    lookups,
    agentConflicts: sum('heartbeat conflict'),
    agentFailures: sum('heartbeat failed'),
    conflictsByAgent,
  };
}

const minus = (a: Record<string, number>, b: Record<string, number>) =>
  Object.fromEntries(
    Object.entries(a)
      .map(([k, v]) => [k, v - (b[k] ?? 0)] as const)
      .filter(([, v]) => v !== 0),
  );

/** What happened between two readings. */
export function since(after: Heartbeats, before: Heartbeats): Heartbeats {
  return {
    byStatus: minus(after.byStatus, before.byStatus),
    lookups: minus(after.lookups, before.lookups),
    agentConflicts: after.agentConflicts - before.agentConflicts,
    agentFailures: after.agentFailures - before.agentFailures,
    conflictsByAgent: minus(after.conflictsByAgent, before.conflictsByAgent),
  };
}
