// A forgotten command is cancelled, not left running: a reset (simulated power-off in a standalone agent,
// the conductor rejecting the token of a linked one) stops the deploy's download and writers, clears the
// disk as a failed write does, and keeps the agent busy until then; the next deploy then owns the disk.
import { createHash, randomBytes } from 'node:crypto';
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { createAgent } from '../../agent/agent.ts';
import { realClock } from '../../agent/clock.ts';
import { AgentIsBusy } from '../../agent/errors.ts';
import { command, type Extension } from '../../agent/commands/types.ts';
import { ConductorLink } from '../../agent/conductor/link.ts';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { nullLogger } from '../../agent/log.ts';
import { startAgent } from '../helpers/api-harness.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { readDevice, runCommand, startImageAgent } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { linkedConfig } from '../helpers/linked-config.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import { makeDiskImage, workDir } from '../helpers/make-image.ts';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { buildImage } from '../helpers/qcow2-corpus.ts';
import { until } from '../helpers/until.ts';

/** Serves one image slowly (256 KiB every 100 ms) and remembers whether the client hung up before the end. */
class DripServer {
  requests = 0;
  hungUp = false;
  finished = false;
  sent = 0;
  private readonly responses = new Set<ServerResponse>();
  private constructor(
    private readonly server: Server,
    readonly url: string,
  ) {}

  static async start(data: Buffer): Promise<DripServer> {
    let self!: DripServer;
    const server = createServer((_req, res) => {
      self.requests++;
      self.responses.add(res);
      res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': data.length });
      let at = 0;
      const timer = setInterval(() => {
        if (at >= data.length) {
          clearInterval(timer);
          self.finished = true;
          res.end();
          return;
        }
        res.write(data.subarray(at, at + 256 * 1024));
        at += 256 * 1024;
        self.sent = at;
      }, 100);
      res.on('close', () => {
        clearInterval(timer);
        if (at < data.length) self.hungUp = true;
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    self = new DripServer(server, `http://127.0.0.1:${(server.address() as AddressInfo).port}/slow.img`);
    return self;
  }

  async close(): Promise<void> {
    for (const r of this.responses) r.destroy();
    await new Promise<void>((r) => this.server.close(() => r()));
  }
}

const sha256 = (b: Buffer) => createHash('sha256').update(b).digest('hex');
const info = (id: string, url: string, data: Buffer) => ({
  id,
  urls: [url],
  os_hash_algo: 'sha256',
  os_hash_value: sha256(data),
  disk_format: 'raw',
  stream_raw_images: true,
});

const macs = await nicMacs();
if (macs.length === 0) console.warn('linked cancellation test skipped: no NIC with a MAC in /sys/class/net');
let loop: LoopDevice;
let work: Awaited<ReturnType<typeof workDir>>;
let slowImage: Buffer;
let fastImage: Buffer;
let images: ImageServer;
const cleanups: (() => Promise<void>)[] = [];

beforeAll(async () => {
  work = await workDir();
  slowImage = Buffer.concat([
    await readFile((await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 6, name: 'slow' })).path),
    randomBytes(4 * MiB),
  ]);
  fastImage = await readFile((await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 8, name: 'fast' })).path);
  images = await startImageServer();
  loop = await attachLoop(16 * MiB);
});
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});
afterAll(async () => {
  await images?.close();
  if (loop) await detachLoop(loop);
  await work?.cleanup();
});

/** The slow deploy was stopped and wiped; the fast one, started after, is exactly what the disk holds. */
async function expectOnlyFastImage(drip: DripServer): Promise<void> {
  // Cancelled while downloading (the agent hung up), or, on a loaded machine, before its request went out.
  expect(drip.hungUp || drip.requests === 0).toBe(true);
  expect(drip.finished).toBe(false);
  const sentAtEnd = drip.sent;
  await new Promise((r) => setTimeout(r, 500));
  expect(drip.sent).toBe(sentAtEnd);
  expect((await readDevice(loop.path, 0, fastImage.length)).equals(fastImage)).toBe(true);
}

describe('a forgotten command is cancelled', () => {
  it('executor: reset cancels the running command and stays busy until it has wound down', async () => {
    let sawAbort = false;
    let windDown!: () => void;
    const ext: Extension = {
      hold: command({
        mode: 'async',
        parse: () => ({}),
        run: (_p, ctx) =>
          new Promise<void>((_resolve, reject) => {
            ctx.signal.addEventListener('abort', () => {
              sawAbort = true;
              // Its tools take a while to exit: the executor must wait for that.
              windDown = () => reject(new Error('stopped'));
            });
          }),
      }),
      quick: command({ mode: 'sync', parse: () => ({}), run: () => 'ok' }),
    };
    const running = await startAgent({}, { test: ext });
    cleanups.push(() => running.close());
    const { executor } = running.agent;
    const first = await executor.submit('test.hold', {});
    const reset = executor.reset('test');
    expect(executor.list()).toEqual([]);
    await until('the abort', () => sawAbort);
    await expect(executor.submit('test.quick', {})).rejects.toBeInstanceOf(AgentIsBusy);
    windDown();
    await reset;
    expect(first.status).toBe('FAILED');
    expect((await executor.submit('test.quick', {})).status).toBe('SUCCEEDED');
  });

  it('a config drive download that is still retrying stops at once when the command is cancelled', async () => {
    let hits = 0;
    const refusing = createServer((_req, res) => {
      hits++;
      res.writeHead(503).end();
    });
    await new Promise<void>((resolve) => refusing.listen(0, '127.0.0.1', resolve));
    cleanups.push(() => new Promise((resolve) => refusing.close(() => resolve())));
    // Ten attempts 30 s apart, on the wall's clock: only cancellation ends it within the test's time.
    const a = await startImageAgent(
      loop.path,
      { 'ipa-image-download-connection-retries': '10', 'ipa-image-download-connection-retry-interval': '30' },
      undefined,
      realClock,
    );
    cleanups.push(() => a.close());
    const { executor } = a.agent;
    const cmd = await executor.submit('standby.prepare_image', {
      image_info: info('fast', images.serve('fast-cd.img', fastImage), fastImage),
      configdrive: `http://127.0.0.1:${(refusing.address() as AddressInfo).port}/configdrive`,
    });
    await until('the config drive request', () => hits >= 1);
    await executor.reset('test');
    expect(cmd.status).toBe('FAILED');
    expect(hits).toBe(1);
  });

  it('standalone: a simulated power-off that fires during a deploy cancels it before the next deploy may run', async () => {
    const drip = await DripServer.start(slowImage);
    cleanups.push(() => drip.close());
    const a = await startImageAgent(loop.path);
    cleanups.push(() => a.close());
    // What a conductor does at the end of a deployment; the power action fires 1 s later, and meanwhile
    // a deploy POSTed just after it starts writing the disk.
    expect((await runCommand(a.url, 'standby.power_off', {}, true)).json.command_status).toBe('SUCCEEDED');
    const slow = await runCommand(
      a.url,
      'standby.prepare_image',
      { image_info: info('slow', drip.url, slowImage) },
      false,
    );
    expect(slow.json.command_status).toBe('RUNNING');
    await until('the simulated power-off', () => a.agent.executor.list().length === 0);
    // Busy until the forgotten deploy is gone; then the next one is accepted and owns the disk.
    const fastUrl = images.serve('fast.img', fastImage);
    const second = await until(
      'the next deploy to be accepted',
      async () => {
        const r = await runCommand(
          a.url,
          'standby.prepare_image',
          { image_info: info('fast', fastUrl, fastImage) },
          true,
        );
        if (r.status !== 409) return r;
        expect(r.json.faultstring).toMatch(/^Agent is busy: executing command prepare_image/);
        return undefined;
      },
      20_000,
      50,
    );
    expect(second.json.command_status, second.text).toBe('SUCCEEDED');
    await expectOnlyFastImage(drip);
  });

  it('a cancel while a streamed qcow2 waits for the device to zero its unallocated ranges stops that zeroing', async () => {
    // The whole image arrives at once; then only the device's zeroing is left, which this blkdiscard never ends.
    const bin = join(work.dir, 'slow-zeroing-bin');
    await mkdir(bin, { recursive: true });
    const pids = join(work.dir, 'slow-zeroing.pids');
    await writeFile(join(bin, 'blkdiscard'), `#!/bin/sh\necho $$ >> ${pids}\nexec sleep 300\n`, { mode: 0o755 });
    const qcow2 = await readFile(
      await buildImage(work.dir, {
        name: 'sparse',
        virtualSize: 12 * MiB,
        writes: [{ offset: 0, length: MiB }],
      }),
    );
    const url = images.serve('sparse.qcow2', qcow2);
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    cleanups.push(async () => {
      process.env.PATH = path;
    });
    const a = await startImageAgent(loop.path);
    cleanups.push(() => a.close());
    const deploy = await runCommand(
      a.url,
      'standby.prepare_image',
      { image_info: { ...info('sparse', url, qcow2), disk_format: 'qcow2' } },
      false,
    );
    expect(deploy.json.command_status).toBe('RUNNING');
    await until('the zeroing to start', async () => (await readFile(pids, 'utf8').catch(() => '')) !== '');
    const zeroing = Number((await readFile(pids, 'utf8')).trim().split('\n')[0]);
    // What a power-off or a new lookup does to a running command; it must not wait for the zeroing.
    const started = Date.now();
    await a.agent.executor.reset('cancelled by the test');
    expect(Date.now() - started, 'the reset waited for the zeroing').toBeLessThan(15_000);
    const alive = await readFile(`/proc/${zeroing}/stat`, 'utf8').then(
      (stat) => !/^\d+ \(.*\) Z/.test(stat),
      () => false,
    );
    expect(alive, 'the blkdiscard outlived the cancelled deploy').toBe(false);
  });

  it.skipIf(macs.length === 0)('linked: the conductor rejecting the token mid-deploy cancels the deploy', async () => {
    const drip = await DripServer.start(slowImage);
    cleanups.push(() => drip.close());
    const fake = await FakeConductor.start({
      nodes: [{ macs, properties: { root_device: { name: loop.path } } }],
      heartbeatTimeout: 1,
    });
    cleanups.push(() => fake.close());
    const [node] = [...fake.nodes.values()];
    const config = linkedConfig(fake.url, {
      'ipa-lookup-interval': '0.05',
      'ipa-http-request-timeout': '2',
      'device-allowlist': loop.path,
      'ipa-image-download-connection-timeout': '2',
    });
    const agent = createAgent(config, nullLogger);
    const link = new ConductorLink(agent, config, nullLogger, { random: () => 0 });
    cleanups.push(() => link.stop());
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    const client = fake.clientFor(node!.uuid);
    cleanups.push(() => client.close());
    const slow = await client.command('standby.prepare_image', { image_info: info('slow', drip.url, slowImage) });
    expect(slow.command_status).toBe('RUNNING');
    await until('the slow deploy to be writing', () => drip.sent >= 2 * MiB);

    fake.powerAction(node!.uuid);
    await fake.waitFor(
      () => node!.internal.agent_url !== undefined && fake.lookups.length === 2,
      'the new lookup and heartbeat',
    );
    const fresh = fake.clientFor(node!.uuid);
    cleanups.push(() => fresh.close());
    expect(await fresh.commands()).toEqual([]);
    const fastUrl = images.serve('fast-linked.img', fastImage);
    const r = await fresh.command(
      'standby.prepare_image',
      { image_info: info('fast', fastUrl, fastImage) },
      { wait: true },
    );
    expect(r.command_status, JSON.stringify(r.command_error)).toBe('SUCCEEDED');
    await expectOnlyFastImage(drip);
  });
});
