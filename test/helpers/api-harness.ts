// Runs an agent in-process on an ephemeral loopback port, for black-box API tests over real HTTP.
import { createAgent, type Agent } from '../../agent/agent.ts';
import type { Clock } from '../../agent/clock.ts';
import type { Extension } from '../../agent/commands/types.ts';
import { buildConfig } from '../../agent/config/config.ts';
import { nullLogger, type Logger } from '../../agent/log.ts';

export interface RunningAgent {
  agent: Agent;
  url: string;
  close(): Promise<void>;
}

export async function startAgent(
  flags: Record<string, string> = {},
  registry?: Readonly<Record<string, Extension>>,
  log: Logger = nullLogger,
  clock?: Clock,
): Promise<RunningAgent> {
  const config = buildConfig(
    new Map(),
    // Root runs these tests: no disk may be writable unless a test allow-lists it (/dev/null matches none).
    new Map(
      Object.entries({
        standalone: 'true',
        'ipa-listen-host': '127.0.0.1',
        'ipa-listen-port': '0',
        'device-allowlist': '/dev/null',
        ...flags,
      }),
    ),
  );
  const agent = createAgent(config, log, { registry, clock });
  const server = await agent.listen();
  return { agent, url: `http://127.0.0.1:${server.port}`, close: () => server.close() };
}

export async function call(
  url: string,
  init: { method?: string; body?: string; redirect?: 'manual' | 'follow' } = {},
): Promise<{ status: number; headers: Headers; text: string; json: any }> {
  const res = await fetch(url, { method: init.method ?? 'GET', body: init.body, redirect: init.redirect ?? 'manual' });
  const text = await res.text();
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}
