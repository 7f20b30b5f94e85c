// A loopback HTTP server for image downloads, with the faults the image pipeline must survive: byte
// ranges on or off, ETag on or off, closing or stalling mid-stream, 404, errors before success. Also a
// forward proxy (absolute-URI requests and CONNECT) that records what went through it.
import { createReadStream } from 'node:fs';
import { readFile, stat } from 'node:fs/promises';
import {
  createServer,
  request as httpRequest,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import { createSecureServer as createHttp2Server } from 'node:http2';
import { createServer as createTlsServer } from 'node:https';
import { connect, type AddressInfo, type Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import { execa } from 'execa';

export type Fault =
  /** Send this many bytes of the body, then drop the connection (and run `then`, to change the file, say). */
  | { kind: 'close-after'; bytes: number; then?: () => void }
  /** Send this many bytes of the body, then send nothing more (until the server closes). */
  | { kind: 'stall-after'; bytes: number }
  /** Send the whole body with the byte at this offset damaged, as a faulty link or cache might. */
  | { kind: 'corrupt'; at: number }
  /** Answer with this status (and these headers) instead of the file. */
  | { kind: 'status'; code: number; headers?: Record<string, string> };

interface Served {
  data?: Buffer;
  file?: string;
  size: number;
  etag: string;
  lastModified: string;
  /** Faults applied to the next requests, one each, in order. */
  faults: Fault[];
}

export interface ServerOptions {
  ranges?: boolean;
  etag?: boolean;
  lastModified?: boolean;
  /** Answer a Range request with 206 whatever If-Range says, as a careless cache might. */
  ignoreIfRange?: boolean;
  /** Serve HTTPS with this key and certificate (PEM). */
  tls?: { key: string; cert: string };
  /** With `tls`: offer HTTP/2 in ALPN as well as HTTP/1.1, as an nginx with `http2 on` does. */
  h2?: boolean;
}

export interface RequestLog {
  path: string;
  range?: string;
  ifRange?: string;
  authorization?: string;
  status: number;
  /** When the request arrived (epoch ms). */
  at: number;
  /** The protocol the client spoke: '1.1' or '2.0'. */
  httpVersion: string;
}

export class ImageServer {
  private readonly files = new Map<string, Served>();
  private readonly sockets = new Set<Socket>();
  private versions = 0;
  readonly requests: RequestLog[] = [];
  base = '';

  constructor(
    private readonly server: Server,
    readonly options: Required<Omit<ServerOptions, 'tls' | 'h2'>>,
  ) {
    server.on('connection', (s) => {
      this.sockets.add(s);
      s.on('close', () => this.sockets.delete(s));
    });
  }

  url(name: string): string {
    return `${this.base}/${name}`;
  }

  /**
   * Serves `data` as `name`; serving a name again is a new version of the file, with new validators, unless
   * `sameValidators` keeps the old ones (a server that changes a file without saying so).
   */
  serve(name: string, data: Buffer | string, { sameValidators = false } = {}): string {
    const version = ++this.versions;
    const before = sameValidators ? this.files.get(name) : undefined;
    this.files.set(name, {
      data: Buffer.from(data),
      size: Buffer.byteLength(data),
      etag: before?.etag ?? `"${name}-${version}"`,
      lastModified: before?.lastModified ?? new Date(Date.UTC(2026, 0, 1, 0, 0, version)).toUTCString(),
      faults: [],
    });
    return this.url(name);
  }

  async serveFile(name: string, path: string): Promise<string> {
    const { size, mtimeMs } = await stat(path);
    this.files.set(name, {
      file: path,
      size,
      etag: `"${name}-${mtimeMs}"`,
      lastModified: new Date(mtimeMs).toUTCString(),
      faults: [],
    });
    return this.url(name);
  }

  /** Queues faults for the next requests of `name`. */
  fault(name: string, ...faults: Fault[]): void {
    this.files.get(name)!.faults.push(...faults);
  }

  handle(req: IncomingMessage, res: ServerResponse): void {
    const name = decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname.slice(1));
    const entry = this.files.get(name);
    const log: RequestLog = {
      path: name,
      range: req.headers.range,
      ifRange: req.headers['if-range'] as string | undefined,
      authorization: req.headers.authorization,
      status: 0,
      at: Date.now(),
      httpVersion: req.httpVersion,
    };
    this.requests.push(log);
    const reply = (status: number, body: string, headers: Record<string, string> = {}) => {
      log.status = status;
      res.writeHead(status, { 'content-type': 'text/plain', ...headers }).end(body);
    };
    if (!entry) {
      reply(404, 'not found');
      return;
    }
    const fault = entry.faults.shift();
    if (fault?.kind === 'status') {
      reply(fault.code, `injected ${fault.code}`, fault.headers);
      return;
    }

    let start = 0;
    const headers: Record<string, string | number> = { 'content-type': 'application/octet-stream' };
    if (this.options.etag) headers.etag = entry.etag;
    if (this.options.lastModified) headers['last-modified'] = entry.lastModified;
    if (this.options.ranges) headers['accept-ranges'] = 'bytes';
    const range = this.options.ranges ? /^bytes=(\d+)-$/.exec(req.headers.range ?? '') : null;
    const ifRange = req.headers['if-range'];
    let status = 200;
    const current = ifRange === (this.options.etag ? entry.etag : entry.lastModified);
    if (range && (!ifRange || current || this.options.ignoreIfRange)) {
      start = Number(range[1]);
      status = 206;
      headers['content-range'] = `bytes ${start}-${entry.size - 1}/${entry.size}`;
    }
    headers['content-length'] = entry.size - start;
    log.status = status;
    res.writeHead(status, headers);

    if (entry.file) {
      createReadStream(entry.file, { start, highWaterMark: 1024 * 1024 }).pipe(res);
      return;
    }
    const body = entry.data!.subarray(start);
    if (fault?.kind === 'corrupt') {
      const damaged = Buffer.from(body);
      damaged[fault.at] = damaged[fault.at]! ^ 0xff;
      return void res.end(damaged);
    }
    if (!fault) return void res.end(body);
    res.write(body.subarray(0, fault.bytes), () => {
      if (fault.kind !== 'close-after') return;
      res.socket?.destroy();
      fault.then?.();
    });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

async function listen(server: Server, scheme = 'http'): Promise<string> {
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  return `${scheme}://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

export async function startImageServer(options: ServerOptions = {}): Promise<ImageServer> {
  const server = options.tls
    ? options.h2
      ? (createHttp2Server({ ...options.tls, allowHTTP1: true }) as unknown as Server)
      : createTlsServer(options.tls)
    : createServer();
  const s = new ImageServer(server, {
    ranges: options.ranges ?? true,
    etag: options.etag ?? true,
    lastModified: options.lastModified ?? false,
    ignoreIfRange: options.ignoreIfRange ?? false,
  });
  server.on('request', (req, res) => s.handle(req, res));
  s.base = await listen(server, options.tls ? 'https' : 'http');
  return s;
}

/** A self-signed certificate for 127.0.0.1, made with openssl in `dir`. */
export async function selfSignedCert(dir: string): Promise<{ key: string; cert: string; certFile: string }> {
  const keyFile = `${dir}/key.pem`;
  const certFile = `${dir}/cert.pem`;
  await execa('openssl', [
    'req',
    '-x509',
    '-newkey',
    'ec',
    '-pkeyopt',
    'ec_paramgen_curve:prime256v1',
    '-nodes',
    '-days',
    '1',
    '-subj',
    '/CN=127.0.0.1',
    '-addext',
    'subjectAltName=IP:127.0.0.1',
    '-keyout',
    keyFile,
    '-out',
    certFile,
  ]);
  return { key: await readFile(keyFile, 'utf8'), cert: await readFile(certFile, 'utf8'), certFile };
}

export interface Proxy {
  url: string;
  /** Absolute URIs of forwarded requests and `host:port` of CONNECT tunnels, in order. */
  seen: string[];
  /** With TLS: the protocol each client connection negotiated (ALPN), in order. */
  alpn: string[];
  close(): Promise<void>;
}

/**
 * A forward proxy (absolute URIs and CONNECT) over HTTP, or over HTTPS with `tls`; an HTTPS one offers h2 as well
 * as HTTP/1.1, as many do, but speaks only HTTP/1.1, so `alpn` shows what each client asked for.
 */
export async function startProxy(tls?: { key: string; cert: string }): Promise<Proxy> {
  const seen: string[] = [];
  const alpn: string[] = [];
  const sockets = new Set<Socket>();
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    seen.push(req.url ?? '');
    const upstream = httpRequest(req.url ?? '', { method: req.method, headers: req.headers }, (up) => {
      res.writeHead(up.statusCode ?? 502, up.headers);
      up.pipe(res);
    });
    upstream.on('error', () => res.destroy());
    req.pipe(upstream);
  };
  const server = tls ? createTlsServer({ ...tls, ALPNProtocols: ['h2', 'http/1.1'] }, handler) : createServer(handler);
  server.on('secureConnection', (s: TLSSocket) => alpn.push(String(s.alpnProtocol)));
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  server.on('connect', (req, client: Socket, head) => {
    seen.push(req.url ?? '');
    const [host, port] = (req.url ?? '').split(':');
    const upstream = connect(Number(port), host!, () => {
      client.write('HTTP/1.1 200 Connection Established\r\n\r\n');
      upstream.write(head);
      upstream.pipe(client);
      client.pipe(upstream);
    });
    upstream.on('error', () => client.destroy());
    sockets.add(upstream);
  });
  const url = await listen(server, tls ? 'https' : 'http');
  return {
    url,
    seen,
    alpn,
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
