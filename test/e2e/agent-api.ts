// The booted ramdisk's agent API as the e2e tests reach it: through the VM's forward of port 9999, standalone
// (no token).
import { request } from 'undici';
import { expect } from 'vitest';
import type { Vm } from './vm.ts';

/** A command's final record, as `POST /v1/commands/?wait=true` answers it. */
export interface CommandRecord<R = Record<string, any>> {
  command_status: string;
  command_result: R | null;
  command_error: { type: string; message: string; details: string } | null;
}

/** GET /v1/status: the status once the agent answers 200, else undefined (a refused connection throws). */
export async function agentStatus(v: Vm): Promise<{ version: string; started_at: number } | undefined> {
  const r = await request(`http://127.0.0.1:${v.agentPort}/v1/status`, { headersTimeout: 2000, bodyTimeout: 2000 });
  if (r.statusCode === 200) return (await r.body.json()) as { version: string; started_at: number };
  await r.body.dump();
  return undefined;
}

/** Runs a command and waits for its end however long it takes (an erase or a deploy under TCG: many minutes). */
export async function agentCommand<R = Record<string, any>>(
  v: Vm,
  name: string,
  params: Record<string, unknown> = {},
): Promise<CommandRecord<R>> {
  const r = await request(`http://127.0.0.1:${v.agentPort}/v1/commands/?wait=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, params }),
    headersTimeout: 0,
    bodyTimeout: 0,
  });
  expect(r.statusCode).toBe(200);
  return (await r.body.json()) as CommandRecord<R>;
}
