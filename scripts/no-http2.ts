// What the bundles get for node:http2 (scripts/bundle.sh). The agent speaks HTTP/1.1 only, as a client
// (allowH2: false on every connector, the proxy's included: agent/image/dispatchers.ts) and as a server, but
// undici and @hono/node-server load node:http2 when they are loaded, and it stays in memory. undici falls back to an empty `constants` when Node has no HTTP/2; @hono/node-server only
// asks whether a request is an HTTP/2 one, which none is.
export class Http2ServerRequest {}
export const constants = {};
export function connect(): never {
  throw new Error('HTTP/2 is not built into the agent');
}
