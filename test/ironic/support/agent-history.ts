// The agent's own command history (GET /v1/commands/, what the conductor reads on every heartbeat).
import { Agent, fetch as undiciFetch } from 'undici';
import type { Rig } from './rig.ts';

interface CommandView {
  command_name: string;
  command_status: string;
  command_result: Record<string, unknown> | null;
}

// the agent's auto-TLS certificate is self-signed; Ironic verifies it, this read does not need to
const insecure = new Agent({ connect: { rejectUnauthorized: false } });

export async function agentCommands(rig: Rig): Promise<CommandView[]> {
  const node = await rig.node();
  const url = node.driver_internal_info.agent_url;
  if (typeof url !== 'string') throw new Error('Ironic holds no agent_url for the node');
  const res = await undiciFetch(`${url}/v1/commands/`, { dispatcher: insecure });
  if (res.status !== 200) throw new Error(`GET ${url}/v1/commands/: HTTP ${res.status} ${await res.text()}`);
  return ((await res.json()) as { commands: CommandView[] }).commands;
}

/** The clean steps the agent ran, in order, by name. */
export async function cleanStepsRun(rig: Rig): Promise<string[]> {
  return (await agentCommands(rig))
    .filter((c) => c.command_name === 'execute_clean_step' && c.command_status === 'SUCCEEDED')
    .map((c) => String((c.command_result?.clean_step as { step?: unknown } | undefined)?.step));
}
