// Serves the Hono app over HTTP, or HTTPS when given a certificate (auto-TLS or configured).
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import type { SecureVersion } from 'node:tls';
import { serve, type ServerType } from '@hono/node-server';
import type { Hono } from 'hono';

/** IPA's TLS 1.2 suites when neither the conductor nor the configuration names any (TLS 1.3 keeps its own). */
const IPA_TLS12_CIPHERS =
  'ECDHE-ECDSA-AES256-GCM-SHA384:ECDHE-ECDSA-AES128-GCM-SHA256:ECDHE-RSA-AES256-GCM-SHA384:ECDHE-RSA-AES128-GCM-SHA256';

export interface TlsMaterial {
  key: string;
  cert: string;
  minVersion: '1.2' | '1.3';
  ciphers?: string;
}

export interface RunningServer {
  port: number;
  protocol: 'http' | 'https';
  close(): Promise<void>;
}

function listen(app: Hono, host: string, port: number, tls?: TlsMaterial): Promise<ServerType> {
  return new Promise((resolve, reject) => {
    const server = serve({
      fetch: app.fetch,
      // Hono answers with Node's own Request and Response; the library would otherwise replace those globals
      // with its own for every module in the process.
      overrideGlobalObjects: false,
      hostname: host,
      port,
      ...(tls
        ? {
            createServer: createHttpsServer,
            serverOptions: {
              key: tls.key,
              cert: tls.cert,
              minVersion: `TLSv${tls.minVersion}` as SecureVersion,
              ciphers: tls.ciphers ?? IPA_TLS12_CIPHERS,
            },
          }
        : {}),
    });
    server.once('listening', () => resolve(server));
    server.once('error', reject);
  });
}

/** Listens on host:port; `::` falls back to `0.0.0.0` on a machine without IPv6, as IPA does. */
export async function startServer(app: Hono, host: string, port: number, tls?: TlsMaterial): Promise<RunningServer> {
  let server: ServerType;
  try {
    server = await listen(app, host, port, tls);
  } catch (err) {
    if (host !== '::' || (err as NodeJS.ErrnoException).code !== 'EAFNOSUPPORT') throw err;
    server = await listen(app, '0.0.0.0', port, tls);
  }
  return {
    port: (server.address() as AddressInfo).port,
    protocol: tls ? 'https' : 'http',
    close: () =>
      new Promise((resolve) => {
        server.close(() => resolve());
        (server as { closeAllConnections?: () => void }).closeAllConnections?.();
      }),
  };
}
