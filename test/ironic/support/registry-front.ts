// What stands between the agent and a registry in real deployments, played on loopback with the test CA:
// - a front (a TLS reverse proxy, like a registry's load balancer) that passes everything to the real registry,
//   except blob GETs in a fault mode: redirected to blob storage (as quay.io or an S3-backed registry answers),
//   forwarded with a credential the registry rejects (a token that expired), or stalled after the first bytes;
// - the blob storage (a CDN) on another loopback address, which records the Authorization header of each GET.
// Ironic reads manifests through the front untouched (its requests are never blob GETs).
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { createServer, request as httpsRequest, type Server } from 'node:https';
import type { Socket } from 'node:net';
import type { TestCa } from './test-ca.ts';

export type FrontMode = 'pass' | 'redirect' | 'wrong-auth' | 'stall';

/** How much of a blob a stalled response sends before it goes silent. */
export const STALL_AFTER_BYTES = 1024 * 1024;
const BLOB_GET = /^\/v2\/.+\/blobs\/(sha256:[0-9a-f]{64})$/;

interface Listening {
  server: Server;
  sockets: Set<Socket>;
  port: number;
}

async function listen(
  tls: TestCa,
  address: string,
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<Listening> {
  const server = createServer({ key: readFileSync(tls.keyFile), cert: readFileSync(tls.certFile) }, handler);
  const sockets = new Set<Socket>();
  server.on('connection', (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  });
  await new Promise<void>((r) => server.listen(0, address, r));
  const addr = server.address();
  if (typeof addr !== 'object' || addr === null) throw new Error('no address');
  return { server, sockets, port: addr.port };
}

function shut(l: Listening): Promise<void> {
  for (const s of l.sockets) s.destroy();
  return new Promise((r) => l.server.close(() => r()));
}

export interface BlobStore {
  /** `127.0.0.2:PORT`: another origin than the registry's. */
  host: string;
  put(digest: string, data: Buffer): void;
  /** Each GET it answered: the path and the Authorization header it carried (undefined: none). */
  gets: { path: string; authorization: string | undefined }[];
  close(): Promise<void>;
}

export async function startBlobStore(tls: TestCa): Promise<BlobStore> {
  const blobs = new Map<string, Buffer>();
  const gets: BlobStore['gets'] = [];
  const l = await listen(tls, '127.0.0.2', (req, res) => {
    const path = req.url ?? '/';
    gets.push({ path, authorization: req.headers.authorization });
    const data = blobs.get(path.replace(/^\/blobs\//, ''));
    if (!data || req.method !== 'GET') {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length }).end(data);
  });
  return {
    host: `127.0.0.2:${l.port}`,
    put: (digest, data) => blobs.set(digest, data),
    gets,
    close: () => shut(l),
  };
}

export interface RegistryFront {
  /** `127.0.0.1:PORT`: what an `oci://` URL through the front names. */
  host: string;
  mode: FrontMode;
  /** Each blob GET the front saw: the Authorization and Range headers it carried, and the mode it met. */
  blobGets: { digest: string; authorization: string | undefined; range: string | undefined; mode: FrontMode }[];
  close(): Promise<void>;
}

export async function startRegistryFront(
  tls: TestCa,
  registryPort: number,
  blobStore: BlobStore,
  wrongAuthorization: string,
): Promise<RegistryFront> {
  const ca = readFileSync(tls.caFile);
  const front: RegistryFront = { host: '', mode: 'pass', blobGets: [], close: async () => undefined };
  const l = await listen(tls, '127.0.0.1', (req, res) => {
    const blob = req.method === 'GET' ? BLOB_GET.exec(req.url ?? '') : null;
    const mode = blob ? front.mode : 'pass';
    if (blob)
      front.blobGets.push({
        digest: blob[1]!,
        authorization: req.headers.authorization,
        range: req.headers.range,
        mode,
      });
    if (mode === 'redirect') {
      res.writeHead(307, { location: `https://${blobStore.host}/blobs/${blob![1]}` }).end();
      return;
    }
    const headers = { ...req.headers, host: `127.0.0.1:${registryPort}` };
    if (mode === 'wrong-auth') headers.authorization = wrongAuthorization;
    const upstream = httpsRequest(
      { host: '127.0.0.1', port: registryPort, path: req.url, method: req.method, headers, ca },
      (up) => {
        res.writeHead(up.statusCode ?? 502, up.headers);
        if (mode !== 'stall') {
          up.pipe(res);
          return;
        }
        // the headers and the blob's first bytes, then silence on an open connection; a resumed GET (a Range
        // past that point) gets the headers and silence at once, so no retry makes progress
        const from = Number(/^bytes=(\d+)-/.exec(String(req.headers.range ?? ''))?.[1] ?? 0);
        let left = Math.max(0, STALL_AFTER_BYTES - from);
        if (left === 0) up.destroy();
        up.on('data', (chunk: Buffer) => {
          if (left === 0) return;
          const part = chunk.subarray(0, left);
          left -= part.length;
          res.write(part);
          if (left === 0) up.destroy();
        });
      },
    );
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  });
  front.host = `127.0.0.1:${l.port}`;
  front.close = () => shut(l);
  return front;
}
