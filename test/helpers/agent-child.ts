// The agent as its own process on the Node running the tests (the pinned one), standalone on an ephemeral
// loopback port and limited to the test's devices: for tests where the agent may die, must be seen to
// keep serving, or is measured from outside (file descriptors, children, memory).
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdir, rmdir, stat, writeFile } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { join } from 'node:path';

const root = new URL('../..', import.meta.url).pathname;

export interface AgentChild {
  url: string;
  pid: number;
  child: ChildProcess;
  /** Every line the agent wrote on stdout and stderr so far. */
  output: string[];
  /** Resolves with the exit code (or signal name) once the process has ended. */
  exited: Promise<number | string>;
  alive(): boolean;
  stop(): Promise<void>;
}

export interface AgentChildOptions {
  flags?: Record<string, string>;
  /** Node options before the agent's entry point (`--import` of a test module, say). */
  nodeArgs?: string[];
  /** Limits the agent's writes to this block device to so many bytes per second (a cgroup v1 blkio throttle). */
  throttle?: { device: string; bytesPerSecond: number };
  env?: Record<string, string>;
}

/** A blkio cgroup throttling writes to `device`; the shell that starts the agent joins it before exec. */
async function throttleGroup(
  device: string,
  bytesPerSecond: number,
): Promise<{ procs: string; remove(): Promise<void> }> {
  const dir = `/sys/fs/cgroup/blkio/ina-test-${process.pid}-${Date.now()}`;
  const rdev = (await stat(device)).rdev;
  await mkdir(dir);
  await writeFile(
    join(dir, 'blkio.throttle.write_bps_device'),
    `${Math.floor(rdev / 256)}:${rdev % 256} ${bytesPerSecond}\n`,
  );
  return { procs: join(dir, 'cgroup.procs'), remove: () => rmdir(dir).catch(() => undefined) };
}

/** Starts the agent; it counts as up once it logs that its API listens (after lookup, with a conductor). */
export async function startAgentChild(device: string, opts: AgentChildOptions = {}): Promise<AgentChild> {
  const flags = {
    standalone: 'true',
    'kernel-cmdline': '/dev/null',
    'ipa-listen-host': '127.0.0.1',
    'ipa-listen-port': '0',
    'device-allowlist': device,
    ...opts.flags,
  };
  const argv = [
    process.execPath,
    '--import',
    'tsx',
    ...(opts.nodeArgs ?? []),
    join(root, 'agent/main.ts'),
    ...Object.entries(flags).map(([k, v]) => `--${k}=${v}`),
  ];
  const group = opts.throttle ? await throttleGroup(opts.throttle.device, opts.throttle.bytesPerSecond) : undefined;
  // exec keeps one process, so that the pid is the agent's and signals reach it.
  const child = group
    ? spawn('sh', ['-c', 'echo $$ > "$0" && exec "$@"', group.procs, ...argv], {
        cwd: root,
        env: { ...process.env, ...opts.env },
      })
    : spawn(argv[0]!, argv.slice(1), { cwd: root, env: { ...process.env, ...opts.env } });
  const output: string[] = [];
  let running = true;
  const exited = new Promise<number | string>((resolve) =>
    child.once('exit', (code, signal) => {
      running = false;
      void group?.remove();
      resolve(code ?? signal ?? -1);
    }),
  );
  const url = new Promise<string>((resolve, reject) => {
    for (const stream of [child.stdout!, child.stderr!]) {
      createInterface({ input: stream }).on('line', (line) => {
        output.push(line);
        if (!line.includes('"msg":"agent API listening"')) return;
        const entry = JSON.parse(line) as { port?: number; callbackUrl?: string };
        resolve(entry.callbackUrl ?? `http://127.0.0.1:${entry.port}`);
      });
    }
    void exited.then((code) => reject(new Error(`the agent exited (${code}) before listening:\n${output.join('\n')}`)));
  });
  // An agent that never listens is killed, not left running with a device allow-listed after the test.
  const deadline = setTimeout(() => child.kill('SIGKILL'), 45_000);
  try {
    await url;
  } finally {
    clearTimeout(deadline);
  }
  return {
    url: await url,
    pid: child.pid!,
    child,
    output,
    exited,
    alive: () => running,
    async stop() {
      if (running) child.kill('SIGTERM');
      const timer = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(timer);
    },
  };
}
