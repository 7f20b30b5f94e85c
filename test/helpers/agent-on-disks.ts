// An agent on loopback allowed to touch only the test's loop devices, and a client polling its commands.
import { AgentClient } from './agent-client.ts';
import { startAgent } from './api-harness.ts';
import type { LoopDevice } from './loop.ts';

export async function withAgentOn<T>(
  devs: LoopDevice[],
  flags: Record<string, string>,
  body: (c: AgentClient) => Promise<T>,
): Promise<T> {
  // An empty list would mean "no allow-list"; /dev/null is a device no disk matches.
  const allow = devs.length > 0 ? devs.map((d) => d.path).join(',') : '/dev/null';
  const running = await startAgent({ 'device-allowlist': allow, ...flags });
  const client = new AgentClient({ url: running.url, pollIntervalMs: 100, pollAttempts: 1200 });
  try {
    return await body(client);
  } finally {
    await client.close();
    await running.close();
  }
}
