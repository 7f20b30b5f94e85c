// A loopback HTTP server for the images the agent downloads (Ironic HEADs the URL too).
import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import { join, normalize } from 'node:path';

export interface ImageServer {
  url(name: string): string;
  close(): Promise<void>;
}

export async function startImageServer(dir: string): Promise<ImageServer> {
  const server: Server = createServer((req, res) => {
    const name = normalize(decodeURIComponent(new URL(req.url ?? '/', 'http://x').pathname)).replace(/^\/+/, '');
    if (name === '' || name.startsWith('..') || name.includes('/')) {
      res.writeHead(404).end();
      return;
    }
    const file = join(dir, name);
    stat(file).then(
      (st) => {
        res.writeHead(200, { 'Content-Type': 'application/octet-stream', 'Content-Length': st.size });
        if (req.method === 'HEAD') res.end();
        else createReadStream(file).pipe(res);
      },
      () => res.writeHead(404).end(),
    );
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const addr = server.address();
  if (typeof addr !== 'object' || addr === null) throw new Error('image server has no address');
  return {
    url: (name) => `http://127.0.0.1:${addr.port}/${name}`,
    close: () => new Promise((r) => server.close(() => r())),
  };
}
