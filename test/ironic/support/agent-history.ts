// The agent's own command history (GET /v1/commands/, what the conductor reads on every heartbeat), read as
// this conductor reads it: with the agent token for sid (the API masks it, so it comes from Ironic's database),
// without for 21.4 (a tokened GET would switch the agent's adaptive rule on, and 21.4's own GETs would fail).
import { join } from 'node:path';
import { execa } from 'execa';
import { Agent, fetch as undiciFetch } from 'undici';
import type { Rig } from './rig.ts';

interface CommandView {
  command_name: string;
  command_status: string;
  command_result: Record<string, unknown> | null;
}

// the agent's auto-TLS certificate is self-signed; Ironic verifies it, this read does not need to
const insecure = new Agent({ connect: { rejectUnauthorized: false } });

/** The node's current agent token, from the conductor's sqlite database. */
export async function agentToken(rig: Rig): Promise<string> {
  const read = `import json, sqlite3, sys
row = sqlite3.connect(sys.argv[1]).execute("select driver_internal_info from nodes where uuid = ?", (sys.argv[2],)).fetchone()
print(json.loads(row[0] or "{}").get("agent_secret_token") or "")`;
  const { stdout } = await execa('python3', ['-c', read, join(rig.ironic.runDir, 'state', 'ironic.sqlite'), rig.uuid]);
  if (stdout.trim() === '') throw new Error('Ironic holds no agent token for the node');
  return stdout.trim();
}

export async function agentCommands(rig: Rig): Promise<CommandView[]> {
  const node = await rig.node();
  const url = node.driver_internal_info.agent_url;
  if (typeof url !== 'string') throw new Error('Ironic holds no agent_url for the node');
  const query = rig.ironic.kind === 'sid' ? `?agent_token=${encodeURIComponent(await agentToken(rig))}` : '';
  const res = await undiciFetch(`${url}/v1/commands/${query}`, { dispatcher: insecure });
  if (res.status !== 200) throw new Error(`GET ${url}/v1/commands/: HTTP ${res.status} ${await res.text()}`);
  return ((await res.json()) as { commands: CommandView[] }).commands;
}

/** The clean steps the agent ran, in order, by name. */
export async function cleanStepsRun(rig: Rig): Promise<string[]> {
  return (await agentCommands(rig))
    .filter((c) => c.command_name === 'execute_clean_step' && c.command_status === 'SUCCEEDED')
    .map((c) => String((c.command_result?.clean_step as { step?: unknown } | undefined)?.step));
}
