// The agent under test as a host process (`tsx agent/main.ts`), in its own process group so that
// stopping it ends tsx and node together; its output goes to a log file the failures quote.
import { spawn, type ChildProcess } from 'node:child_process';
import { openSync, closeSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join, resolve } from 'node:path';
import { inject } from 'vitest';
import { noteStarted } from './leftovers.ts';

const REPO = resolve(import.meta.dirname, '../../..');

export interface AgentProcess {
  port: number;
  logFile: string;
  log(): Promise<string>;
  /** The last `n` log lines, for failure messages. */
  tail(n?: number): Promise<string>;
  exited(): boolean;
  stop(): Promise<void>;
}

export async function freePort(): Promise<number> {
  return new Promise((res, rej) => {
    const srv = createServer();
    srv.once('error', rej);
    srv.listen(0, '127.0.0.1', () => {
      const addr = srv.address();
      srv.close(() => (typeof addr === 'object' && addr ? res(addr.port) : rej(new Error('no port'))));
    });
  });
}

export async function startAgentProcess(opts: {
  apiUrl: string;
  disk: string;
  dir: string;
  autoTls: boolean;
  extraFlags?: Record<string, string>;
}): Promise<AgentProcess> {
  const port = await freePort();
  const flags: Record<string, string> = {
    'ipa-api-url': opts.apiUrl,
    'device-allowlist': opts.disk,
    'ipa-listen-host': '127.0.0.1',
    'ipa-listen-port': String(port),
    'ipa-advertise-host': '127.0.0.1',
    'ipa-advertise-port': String(port),
    'ipa-enable-auto-tls': String(opts.autoTls),
    'ipa-debug': 'true',
    ...opts.extraFlags,
  };
  const logFile = join(opts.dir, `agent-${port}.log`);
  const fd = openSync(logFile, 'a');
  const child: ChildProcess = spawn(
    join(REPO, 'node_modules/.bin/tsx'),
    ['agent/main.ts', ...Object.entries(flags).map(([k, v]) => `--${k}=${v}`)],
    { cwd: REPO, detached: true, stdio: ['ignore', fd, fd] },
  );
  closeSync(fd);
  if (child.pid !== undefined) noteStarted(inject('leftoversFile'), { kind: 'agent', pid: child.pid });
  let exitedFlag = false;
  const exited = new Promise<void>((r) =>
    child.once('exit', () => {
      exitedFlag = true;
      r();
    }),
  );
  const log = () => readFile(logFile, 'utf8').catch(() => '');
  return {
    port,
    logFile,
    log,
    tail: async (n = 40) =>
      (await log())
        .split('\n')
        .slice(-n - 1)
        .join('\n'),
    exited: () => exitedFlag,
    stop: async () => {
      if (exitedFlag || child.pid === undefined) return;
      const group = -child.pid;
      try {
        process.kill(group, 'SIGTERM');
      } catch {
        return;
      }
      const timer = setTimeout(() => {
        try {
          process.kill(group, 'SIGKILL');
        } catch {
          // already gone
        }
      }, 5000);
      await exited;
      clearTimeout(timer);
    },
  };
}
