// The parts of undici the agent uses, imported one by one. undici's index loads everything it offers at
// start (fetch, WebSocket, EventSource, the caches with node:sqlite, the mocks): more than half of the
// bundle, which the idle agent holds in memory (docs/runtime.md, "Memory on Node 24"). The index also
// puts request/stream/connect… on Dispatcher.prototype; this module leaves the prototype alone and calls
// undici's API functions on a dispatcher instead. The paths below are undici's internals, so package.json
// pins undici exactly and test/project/undici-deep-imports.test.ts checks that they still resolve.
import { isIP } from 'node:net';
import type { Dispatcher as DispatcherType, buildConnector } from 'undici';
import AgentClass from 'undici/lib/dispatcher/agent.js';
import PoolClass from 'undici/lib/dispatcher/pool.js';
import ProxyAgentClass from 'undici/lib/dispatcher/proxy-agent.js';
import api from 'undici/lib/api/index.js';
import redirectInterceptor from 'undici/lib/interceptor/redirect.js';

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
  return api.request.call(dispatcher, { ...rest, origin: target.origin, path: `${target.pathname}${target.search}` });
}

/**
 * The connection pool to a proxy, for ProxyAgent's `clientFactory`. ProxyAgent opens its tunnels with the pool's
 * `connect()`, which undici's index would have put on every dispatcher's prototype: this pool alone gets it.
 * ProxyAgent also names a proxy given by address as the TLS server name (SNI), which RFC 6066 forbids and Node
 * deprecates (DEP0123): the name is dropped then, and the certificate is still checked against the address.
 */
export function proxyPool(origin: URL, opts: object): DispatcherType {
  const { connect } = opts as { connect: buildConnector.connector };
  const pool = new PoolClass(origin, {
    connect: (c, callback) =>
      connect({ ...c, servername: c.servername && isIP(c.servername) ? undefined : c.servername }, callback),
  });
  pool.connect = api.connect;
  return pool;
}
