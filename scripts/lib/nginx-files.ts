// The bench's image server (unless BENCH_SERVER=node): Debian's nginx serving one folder on loopback with
// sendfile, as a conductor's HTTP server (Apache or nginx) serves `[deploy]http_root`. The test helper's Node
// server in the bench's own process spends a core-second per GiB on the same two cores as the agent it
// measures (docs/qcow2-streaming.md).
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { basename, dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';

export interface FileServer {
  /** The URL of `path`, a file in the folder being served. */
  urlOf(path: string): string;
  close(): Promise<void>;
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((resolve) => probe.listen(0, '127.0.0.1', resolve));
  const { port } = probe.address() as AddressInfo;
  await new Promise((resolve) => probe.close(resolve));
  return port;
}

export async function startNginx(root: string): Promise<FileServer> {
  const conf = await mkdtemp(join(tmpdir(), 'ina-nginx-'));
  const port = await freePort();
  const temp = (what: string) => `${what}_temp_path ${join(conf, what)};`;
  await writeFile(
    join(conf, 'nginx.conf'),
    [
      'daemon off;',
      'master_process off;',
      'worker_processes 1;',
      `error_log ${join(conf, 'error.log')};`,
      `pid ${join(conf, 'nginx.pid')};`,
      'events { worker_connections 64; }',
      'http {',
      '  access_log off;',
      '  sendfile on;',
      '  default_type application/octet-stream;',
      `  ${['client_body', 'proxy', 'fastcgi', 'uwsgi', 'scgi'].map(temp).join(' ')}`,
      `  server { listen 127.0.0.1:${port}; root ${root}; }`,
      '}',
    ].join('\n'),
  );
  // -e: nginx opens its error log before it reads the configuration, at a packaged path otherwise.
  const nginx = execa('nginx', ['-e', join(conf, 'error.log'), '-c', join(conf, 'nginx.conf')], { reject: false });
  let exited = false;
  void nginx.then(() => {
    exited = true;
  });
  const url = `http://127.0.0.1:${port}/`;
  const stop = async () => {
    nginx.kill('SIGTERM');
    await nginx;
    await rm(conf, { recursive: true, force: true });
  };
  try {
    for (let i = 0; ; i++) {
      if (exited) {
        const r = await nginx;
        throw new Error(`nginx did not start: ${r.stderr || r.message}`);
      }
      const server = await fetch(url, { method: 'HEAD' }).then(
        (res) => res.headers.get('server') ?? '',
        () => null,
      );
      // Another program may have taken the port between freePort() and nginx's bind.
      if (server !== null && !server.startsWith('nginx'))
        throw new Error(`port ${port} answers as "${server}", not nginx`);
      if (server !== null) break;
      if (i === 50) throw new Error('nginx did not answer on loopback within 5 s');
      await sleep(100);
    }
  } catch (err) {
    await stop();
    throw err;
  }
  return {
    urlOf(path) {
      if (dirname(path) !== root) throw new Error(`${path} is not in ${root}, the folder nginx serves`);
      return `${url}${encodeURIComponent(basename(path))}`;
    },
    close: stop,
  };
}
