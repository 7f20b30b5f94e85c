// The other node of burnin_network, played by the test over loopback: fio with the agent's own arguments
// (agent/burnin/fio.ts), the roles swapped. The partner writes first (the agent reads), then reads what the
// agent writes.
//
// fio's net engine gives each of its jobs a port of its own, from NETWORK_PORT up. A reader that starts while
// only some of the writer's jobs listen is served by those alone and the others wait for ever, so each side
// reads only once all the other side's ports listen: the partner's reader waits for the agent's writer, and the
// test starts the agent's reader (the clean step) only after `writerListening()`.
import { createServer } from 'node:net';
import { mkdirSync } from 'node:fs';
import { execa } from 'execa';
import { fioNetworkArgs, NETWORK_PORT } from '../../agent/burnin/fio.ts';

export { NETWORK_PORT };

/** Whether fio's first port is free on loopback (a test skips, saying so, when it is not). */
function fioPortFree(): Promise<boolean> {
  return new Promise((res) => {
    const s = createServer();
    s.once('error', () => res(false));
    s.listen(NETWORK_PORT, '127.0.0.1', () => s.close(() => res(true)));
  });
}

export interface FioPorts {
  /** Whether the ports were free once held (something else on the machine may use them: the test skips). */
  free: boolean;
  release(): Promise<void>;
}

/**
 * Takes fio's ports for one test, across processes: suites that run side by side (`.ci/run` runs both Ironic
 * suites at once, each with a burnin_network test) take turns on a machine-wide lock instead of finding the ports
 * taken. The lock is held by a `flock` child that lets go when `release()` closes its input or this process ends;
 * its file is in /run/lock (a tmpfs emptied at boot), not /tmp, which tests leave as they found it.
 */
export async function claimFioPorts(): Promise<FioPorts> {
  mkdirSync('/run/lock', { recursive: true });
  const holder = execa('flock', ['/run/lock/ina-fio-net.lock', 'sh', '-c', 'echo held; exec cat >/dev/null'], {
    stdin: 'pipe',
    reject: false,
  });
  const held = await new Promise<boolean>((res) => {
    holder.stdout?.once('data', () => res(true));
    void holder.then(() => res(false));
  });
  const release = async () => {
    holder.stdin?.end();
    await holder;
  };
  if (!held) throw new Error(`flock on fio's port lock ended before it held it: ${(await holder).stderr}`);
  return { free: await fioPortFree(), release };
}

export interface FioPartner {
  /** Resolves once all of the partner writer's ports listen. */
  writerListening(): Promise<void>;
  /**
   * The partner's exit code: 0 when it wrote and read, 1 when its writer failed (the agent did not read), 2 when
   * the agent's writer never listened, else its reader's.
   */
  exitCode(): Promise<number | undefined>;
  /** Kills the partner's whole process group (fio outlives its shell otherwise). */
  stop(): Promise<void>;
}

export function startFioPartner(timeoutMs: number): FioPartner {
  const plan = { role: 'writer' as const, partner: '127.0.0.1', runtimeS: 1 };
  const writer = fioNetworkArgs(plan, true);
  const reader = fioNetworkArgs(plan, false).join(' ');
  const jobs = Number(writer[writer.indexOf('--numjobs') + 1]);
  const last = NETWORK_PORT + jobs - 1;
  const countListening = `ss -Hltn | awk '{n = split($4, a, ":"); p = a[n]; if (p >= ${NETWORK_PORT} && p <= ${last}) c++} END {print c + 0}'`;
  const child = execa(
    'sh',
    [
      '-c',
      [
        `fio ${writer.join(' ')} >/dev/null || exit 1`,
        `for i in $(seq 1 300); do [ "$(${countListening})" -ge ${jobs} ] && exec fio ${reader} >/dev/null; sleep 0.1; done; exit 2`,
      ].join('\n'),
    ],
    { reject: false, timeout: timeoutMs, detached: true },
  );
  let exited = false;
  void child.then(() => {
    exited = true;
  });
  return {
    async writerListening() {
      for (let i = 0; Number((await execa('sh', ['-c', countListening])).stdout) < jobs; i++) {
        if (i > 300) throw new Error(`the partner's fio writer did not listen on ports ${NETWORK_PORT}-${last}`);
        if (exited) throw new Error(`the partner exited (${(await child).exitCode}) before its writer listened`);
        await new Promise((r) => setTimeout(r, 100));
      }
    },
    async exitCode() {
      return (await child).exitCode;
    },
    async stop() {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // already gone
      }
      await child;
    },
  };
}
