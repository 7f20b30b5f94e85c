// The burn-in clean steps for real, through the agent's API: stress-ng on the CPU and memory for a second or
// two, fio's verified read/write on a loop device the test attaches and allow-lists (the only disk it may
// touch), and fio's network pair over loopback with the test as the partner node.
import { open } from 'node:fs/promises';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { LogRing, type Logger } from '../../agent/log.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { runCleanStep } from '../helpers/clean-step.ts';
import { claimFioPorts, NETWORK_PORT, startFioPartner } from '../helpers/fio-partner.ts';
import { startAgent } from '../helpers/api-harness.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function agent(allow: string, log?: Logger): Promise<AgentClient> {
  const a = await startAgent({ 'device-allowlist': allow }, undefined, log);
  const c = new AgentClient({ url: a.url, pollIntervalMs: 100, pollAttempts: 1200 });
  cleanups.push(
    () => a.close(),
    () => c.close(),
  );
  return c;
}

describe('burn-in steps', () => {
  /** The stress-ng run the agent logged: its arguments and the end of its output. */
  const stressRun = (ring: LogRing, kind: string) => {
    const started = ring.tail().find((l) => l.includes(`burn-in (${kind}): stress-ng for`));
    const passed = ring.tail().find((l) => l.includes(`burn-in (${kind}) passed`));
    return { args: started ? (JSON.parse(started).args as string[]) : [], output: passed ?? '' };
  };

  it('burnin_cpu: stress-ng on one CPU for 2 s', async () => {
    const ring = new LogRing();
    const c = await agent('/dev/null', pino({ base: null }, ring));
    const r = await runCleanStep(c, 'burnin_cpu', {}, { agent_burnin_cpu_cpu: 1, agent_burnin_cpu_timeout: 2 });
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ clean_result: null, clean_step: { step: 'burnin_cpu' } });
    // stress-ng itself ran, with the node's settings, to its end.
    const run = stressRun(ring, 'cpu');
    expect(run.args).toEqual(expect.arrayContaining(['--cpu', '1', '--timeout', '2']));
    expect(run.output).toMatch(/successful run completed/);
  });

  it('burnin_memory: stress-ng with one 32 MiB vm worker for 2 s', async () => {
    const ring = new LogRing();
    const c = await agent('/dev/null', pino({ base: null }, ring));
    const r = await runCleanStep(
      c,
      'burnin_memory',
      {},
      {
        agent_burnin_vm_vm: 1,
        'agent_burnin_vm_vm-bytes': '32M',
        agent_burnin_vm_timeout: 2,
      },
    );
    expect(r.command_error).toBeNull();
    const run = stressRun(ring, 'memory');
    expect(run.args).toEqual(expect.arrayContaining(['--vm', '1', '--vm-bytes', '32M', '--timeout', '2']));
    expect(run.output).toMatch(/successful run completed/);
  });

  it('burnin_disk: fio writes and verifies the allow-listed loop device', async () => {
    await withLoops([16 * MiB], async ([dev]) => {
      const fh = await open(dev!.path, 'r+');
      await fh.write(Buffer.alloc(16 * MiB, 0xaa), 0, 16 * MiB, 0);
      await fh.close();
      const c = await agent(dev!.path);
      const r = await runCleanStep(c, 'burnin_disk', {}, { agent_burnin_fio_disk_loops: 1 });
      expect(r.command_error).toBeNull();
      const after = await open(dev!.path, 'r');
      const buf = Buffer.alloc(16 * MiB);
      await after.read(buf, 0, buf.length, 0);
      await after.close();
      expect(
        buf.findIndex((b) => b !== 0xaa),
        'fio wrote the device',
      ).toBeGreaterThanOrEqual(0);
    });
  });

  it('burnin_network: a reader, then a writer, with the test as the partner over loopback', async (t) => {
    const ports = await claimFioPorts();
    cleanups.push(() => ports.release());
    if (!ports.free) t.skip(`port ${NETWORK_PORT} (fio's net engine, as IPA's) is in use on this machine`);
    const partner = startFioPartner(120_000);
    cleanups.push(() => partner.stop());
    await partner.writerListening();
    const c = await agent('/dev/null');
    const r = await runCleanStep(
      c,
      'burnin_network',
      {},
      {
        agent_burnin_fio_network_config: { role: 'reader', partner: '127.0.0.1' },
        agent_burnin_fio_network_runtime: 1,
      },
    );
    expect(r.command_error).toBeNull();
    expect(await partner.exitCode(), 'the partner read what the agent wrote').toBe(0);
  });
});
