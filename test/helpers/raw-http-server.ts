// An HTTP/1.1 server written on bare TCP sockets, so that a test decides exactly what goes on the wire and
// when: the whole answer and the FIN in one write, a keep-alive connection, a stall, a reset, a body cut
// short. node:http cannot do these on purpose (it frames and flushes as it sees fit).
import { createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';

export type Behaviour =
  /** Headers, the whole body and the FIN at once (`Connection: close`), as python's http.server does. */
  | 'close'
  /** Headers and body, then the connection stays open for the next request. */
  | 'keep-alive'
  /** Headers and part of the body, then nothing more until the client gives up. */
  | 'stall'
  /** Headers and part of the body, then a TCP reset. */
  | 'reset'
  /** Headers and part of the body, then a FIN: fewer bytes than Content-Length announced. */
  | 'truncate';

export interface RawRequest {
  method: string;
  path: string;
  headers: Record<string, string>;
}

export interface RawServerOptions {
  /** How to answer each request (default 'close'). */
  behaviour?: (req: RawRequest) => Behaviour;
  /**
   * Runs before anything of the answer is written, and `after` once all of it is in the kernel's hands
   * (the FIN too, for 'close') or 300 ms have passed: the place to stop and resume the client around it.
   */
  around?: (req: RawRequest) => { after(): Promise<void> | void } | undefined;
}

export class RawHttpServer {
  private readonly files = new Map<string, Buffer>();
  private readonly sockets = new Set<Socket>();
  readonly requests: (RawRequest & { behaviour: Behaviour })[] = [];
  base = '';

  constructor(
    private readonly server: Server,
    private readonly options: RawServerOptions,
  ) {}

  serve(name: string, data: Buffer | string): string {
    this.files.set(`/${name}`, Buffer.from(data));
    return `${this.base}/${name}`;
  }

  /** Connections still open. */
  get openSockets(): number {
    return this.sockets.size;
  }

  handle(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => socket.destroy());
    let pending = Buffer.alloc(0);
    let busy = false;
    const next = (): void => {
      const end = pending.indexOf('\r\n\r\n');
      if (busy || end < 0) return;
      const head = pending.subarray(0, end).toString('latin1').split('\r\n');
      pending = pending.subarray(end + 4);
      const [method = '', path = ''] = head[0]!.split(' ');
      const headers = Object.fromEntries(
        head.slice(1).map((l) => [l.slice(0, l.indexOf(':')).toLowerCase(), l.slice(l.indexOf(':') + 1).trim()]),
      );
      busy = true;
      void this.answer(socket, { method, path, headers }).then((open) => {
        busy = false;
        if (open) next();
      });
    };
    socket.on('data', (chunk: Buffer) => {
      pending = Buffer.concat([pending, chunk]);
      next();
    });
  }

  /** Answers one request; resolves true when the connection stays open for another. */
  private async answer(socket: Socket, req: RawRequest): Promise<boolean> {
    const file = this.files.get(req.path);
    const behaviour = file ? (this.options.behaviour?.(req) ?? 'close') : 'close';
    this.requests.push({ ...req, behaviour });
    if (!file) {
      socket.end('HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n');
      return false;
    }
    const range = /^bytes=(\d+)-$/.exec(req.headers.range ?? '');
    const from = range && Number(range[1]) < file.length ? Number(range[1]) : 0;
    const body = file.subarray(from);
    const status =
      from > 0 ? `206 Partial Content\r\nContent-Range: bytes ${from}-${file.length - 1}/${file.length}` : '200 OK';
    const head = Buffer.from(
      `HTTP/1.1 ${status}\r\nContent-Length: ${body.length}\r\nAccept-Ranges: bytes\r\nETag: "raw-${file.length}"\r\n` +
        `Connection: ${behaviour === 'keep-alive' ? 'keep-alive' : 'close'}\r\n\r\n`,
    );
    const hook = this.options.around?.(req);
    const part = body.subarray(0, Math.floor(body.length / 2));
    const written = new Promise<void>((resolve) => {
      switch (behaviour) {
        case 'close':
          socket.end(Buffer.concat([head, body]), resolve);
          break;
        case 'keep-alive':
          socket.write(Buffer.concat([head, body]), () => resolve());
          break;
        case 'stall':
          socket.write(Buffer.concat([head, part]), () => resolve());
          break;
        case 'reset':
          socket.write(Buffer.concat([head, part]), () => {
            socket.resetAndDestroy();
            resolve();
          });
          break;
        case 'truncate':
          socket.end(Buffer.concat([head, part]), resolve);
          break;
      }
    });
    // A stopped client leaves a large answer half in the kernel, so `after` waits no longer than a moment for it.
    await Promise.race([written, sleep(300)]);
    await hook?.after();
    await written;
    return behaviour === 'keep-alive';
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }
}

export async function startRawHttpServer(options: RawServerOptions = {}): Promise<RawHttpServer> {
  const server = createServer();
  const raw = new RawHttpServer(server, options);
  server.on('connection', (s) => raw.handle(s));
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  raw.base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return raw;
}
