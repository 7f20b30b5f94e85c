// Process-level defence: an exception that escapes everything during a deploy (injected from a timer, where
// nothing can catch it) ends the agent with its stack in the log, on stderr (the console) and in the status
// file, the running command FAILED there, and a non-zero exit. The test then plays the ramdisk's supervisor
// and starts the agent again: it says on stderr that it restarted and why, keeps the agent token the
// conductor will not hand out twice (so its lookup succeeds) and the auto-TLS certificate the conductor
// stored (so its heartbeats are accepted), and its first heartbeat's log line says it too.
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nicMacs } from '../agent/conductor/nics.ts';
import { CRASH_EXIT_CODE } from '../agent/last-words.ts';
import { startAgentChild, type AgentChild } from './helpers/agent-child.ts';
import { FakeConductor } from './helpers/fake-conductor.ts';
import { attachLoop, detachLoop, GiB, type LoopDevice } from './helpers/loop.ts';
import { startRawHttpServer } from './helpers/raw-http-server.ts';

const macs = await nicMacs();
if (macs.length === 0)
  console.warn(`${import.meta.url}: skipped: no physical NIC with a MAC in /sys/class/net for the lookup`);

let dir: string;
let loop: LoopDevice;

beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-crash-'));
  loop = await attachLoop(5 * GiB);
});

afterAll(async () => {
  await detachLoop(loop);
  await rm(dir, { recursive: true, force: true });
});

describe('an uncaught exception during a deploy', () => {
  it.skipIf(macs.length === 0)('is recorded, ends the process non-zero, and the restarted agent says so', async () => {
    const fake = await FakeConductor.start({ nodes: [{ macs }] });
    const node = [...fake.nodes.values()][0]!;
    // The image never finishes: the deploy is still running when the fault strikes.
    const server = await startRawHttpServer({ behaviour: () => 'stall' });
    const url = server.serve('image.raw', Buffer.alloc(4 * 1024 * 1024, 1));
    const statusFile = join(dir, 'status.json');
    const logFile = join(dir, 'agent.log');
    // One port for both runs, as the ramdisk's 9999: the conductor refuses a changed callback_url too.
    const port = await new Promise<number>((resolve) => {
      const probe = createServer().listen(0, '127.0.0.1', () => {
        const { port: free } = probe.address() as AddressInfo;
        probe.close(() => resolve(free));
      });
    });
    const flags = {
      'ipa-listen-port': String(port),
      'ipa-advertise-port': String(port),
      'ipa-advertise-host': '127.0.0.1',
      standalone: 'false',
      'ipa-api-url': fake.url,
      'ipa-nic-wait-timeout': '0',
      'status-file': statusFile,
      'log-file': logFile,
    };
    let agent: AgentChild | undefined;
    let client: ReturnType<FakeConductor['clientFor']> | undefined;
    try {
      agent = await startAgentChild(loop.path, {
        flags,
        nodeArgs: ['--import', join(import.meta.dirname, 'helpers/inject-fault.ts')],
      });
      await fake.waitFor(() => fake.heartbeats.some((h) => h.status === 202), 'a heartbeat', 40_000);
      client = fake.clientFor(node.uuid);
      const started = await client.command(
        'standby.prepare_image',
        {
          image_info: {
            id: 'crash',
            urls: [url],
            disk_format: 'raw',
            stream_raw_images: true,
            os_hash_algo: 'sha256',
            os_hash_value: 'a'.repeat(64),
          },
        },
        { wait: false, poll: false },
      );
      expect(started.command_status).toBe('RUNNING');
      await expect.poll(() => server.requests.length, { timeout: 20_000 }).toBeGreaterThan(0);

      process.kill(agent.pid, 'SIGUSR2');
      expect(await agent.exited).toBe(CRASH_EXIT_CODE);
      const console1 = agent.output.join('\n');
      expect(console1).toMatch(
        /ironic-node-agent: uncaught exception during prepare_image, exiting for a restart:\nError: injected fault\n\s+at Immediate/,
      );
      const status = JSON.parse(await readFile(statusFile, 'utf8'));
      expect(status.crash).toMatchObject({
        error: 'Error: injected fault',
        command: { id: started.id, name: 'prepare_image' },
      });
      expect(status.crash.stack).toMatch(/inject-fault\.ts/);
      // Auto-TLS is on (the default): the certificate the conductor stored goes along with its key.
      const stored = node.internal.agent_verify_ca;
      expect(stored).toMatch(/BEGIN CERTIFICATE/);
      expect(status.tls.cert).toBe(stored);
      expect(status.tls.key).toMatch(/BEGIN PRIVATE KEY/);
      expect(status.commands).toEqual([
        expect.objectContaining({
          id: started.id,
          status: 'FAILED',
          error: expect.objectContaining({ type: 'CommandExecutionError' }),
        }),
      ]);
      expect(status.commands[0].error.details).toMatch(
        /failed while running this command and restarts: Error: injected fault/,
      );
      const fatal = (await readFile(logFile, 'utf8')).split('\n').filter((l) => l.includes('"level":60'));
      expect(fatal).toHaveLength(1);
      expect(JSON.parse(fatal[0]!)).toMatchObject({
        msg: 'uncaught exception, exiting for a restart: Error: injected fault',
        origin: 'uncaughtException',
      });

      // The supervisor's part: start it again, same files, no fault this time.
      const beatsBefore = fake.heartbeats.length;
      agent = await startAgentChild(loop.path, { flags });
      // Accepted: same callback URL, same certificate (a new one would be refused with a 400).
      await expect
        .poll(() => fake.heartbeats.slice(beatsBefore).some((h) => h.status === 202), { timeout: 40_000 })
        .toBe(true);
      expect(fake.heartbeats.slice(beatsBefore).filter((h) => h.status !== 202)).toEqual([]);
      expect(node.internal.agent_verify_ca).toBe(stored);
      const restart = agent.output.find((l) => l.startsWith('ironic-node-agent: restarted'));
      expect(restart).toMatch(
        new RegExp(
          `^ironic-node-agent: restarted after an uncaught exception at \\S+: Error: injected fault; prepare_image \\(${started.id}\\) was marked FAILED$`,
        ),
      );
      await expect
        .poll(
          async () =>
            (await readFile(logFile, 'utf8')).includes('"msg":"first heartbeat, restarted after an uncaught exception'),
          { timeout: 5000 },
        )
        .toBe(true);
      const after = JSON.parse(await readFile(statusFile, 'utf8'));
      expect(after.status.restartedAfter).toMatchObject({ error: 'Error: injected fault' });
      expect(after.token).toBeUndefined();
      expect(after.tls).toBeUndefined();
      expect(after.crash).toBeUndefined();
    } finally {
      await client?.close();
      await agent?.stop();
      await server.close();
      await fake.close();
    }
  });
});
