// The parts of undici the agent uses, imported one by one. undici's index loads everything it offers at
// start (fetch, WebSocket, EventSource, the caches with node:sqlite, the mocks): more than half of the
// bundle, which the idle agent holds in memory (docs/runtime.md, "Memory on Node 24").
import type { Dispatcher as DispatcherType } from 'undici';
import AgentClass from 'undici/lib/dispatcher/agent.js';
import DispatcherClass from 'undici/lib/dispatcher/dispatcher.js';
import ProxyAgentClass from 'undici/lib/dispatcher/proxy-agent.js';
import api from 'undici/lib/api/index.js';
import redirectInterceptor from 'undici/lib/interceptor/redirect.js';

// What undici's index does first: every dispatcher gets request/stream/connect… (ProxyAgent tunnels with connect).
Object.assign(DispatcherClass.prototype, api);

export type { Dispatcher } from 'undici';
export const Agent = AgentClass;
export type Agent = InstanceType<typeof AgentClass>;
export const ProxyAgent = ProxyAgentClass;
export const redirect = redirectInterceptor;

export type RequestOptions = Omit<DispatcherType.RequestOptions, 'origin' | 'path'> & { dispatcher: DispatcherType };

/** undici's `request(url, options)`, always with the given dispatcher. */
export function request(url: string, opts: RequestOptions): Promise<DispatcherType.ResponseData> {
  const { dispatcher, ...rest } = opts;
  const target = new URL(url);
  return dispatcher.request({ ...rest, origin: target.origin, path: `${target.pathname}${target.search}` });
}
