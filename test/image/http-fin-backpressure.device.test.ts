// Regression test for nodejs/undici#5360: undici 7's HTTP/1 parser, paused because the body's consumer was
// behind (back-pressure), asserted `!this.paused` when the server's FIN arrived, an uncatchable error that
// killed the whole agent mid-deploy. The server here sends headers, the whole body and the FIN in one write
// while the agent is deliberately slow: its disk writes throttled by a blkio cgroup (the image), or the
// whole process stopped while the answer lands in its socket (the checksum file, the config drive). Each
// command must end, and the agent must still be serving afterwards. docs/runtime.md records this test
// failing on undici 7.30.2.
import { createHash, randomBytes } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startAgentChild, type AgentChild } from '../helpers/agent-child.ts';
import { buildIso } from '../helpers/configdrive.ts';
import { readDevice } from '../helpers/image-agent.ts';
import { attachLoop, detachLoop, GiB, type LoopDevice } from '../helpers/loop.ts';
import { makeDiskImage, workDir } from '../helpers/make-image.ts';
import { startRawHttpServer, type RawHttpServer, type RawRequest } from '../helpers/raw-http-server.ts';

let loop: LoopDevice;
let image: Buffer;
let digest: string;
let work: Awaited<ReturnType<typeof workDir>>;
let agent: AgentChild | undefined;
let server: RawHttpServer | undefined;

beforeAll(async () => {
  work = await workDir();
  image = await readFile((await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 6, randomKiB: 2048 })).path);
  digest = createHash('sha256').update(image).digest('hex');
  // The agent picks the smallest disk of at least 4 GiB when no hints are given; the file stays sparse.
  loop = await attachLoop(5 * GiB);
});

afterEach(async () => {
  await agent?.stop();
  await server?.close();
  agent = server = undefined;
});

afterAll(async () => {
  await detachLoop(loop);
  await work.cleanup();
});

/**
 * Stops the agent while the answer to `path` is written, and lets it go on once all of it, FIN included, waits in its
 * socket.
 */
function stopAgentAround(path: string) {
  return (req: RawRequest) => {
    if (req.path !== `/${path}`) return undefined;
    process.kill(agent!.pid, 'SIGSTOP');
    return { after: () => void process.kill(agent!.pid, 'SIGCONT') };
  };
}

async function post(name: string, params: unknown): Promise<any> {
  const res = await fetch(`${agent!.url}/v1/commands/?wait=true`, {
    method: 'POST',
    body: JSON.stringify({ name, params }),
  }).catch((err: Error) => {
    // Most likely the agent died: what it wrote last says why.
    throw new Error(`${name}: ${err.message}; the agent's last lines:\n${agent!.output.slice(-12).join('\n')}`);
  });
  expect(res.status).toBe(200);
  return res.json();
}

/** The agent is alive and its API answers. */
async function expectServing(): Promise<void> {
  expect(agent!.alive(), `the agent died:\n${agent!.output.slice(-20).join('\n')}`).toBe(true);
  const res = await fetch(`${agent!.url}/v1/status`);
  expect(res.status).toBe(200);
  expect(agent!.output.join('\n')).not.toMatch(/AssertionError|uncaught/i);
}

/** Random bytes behind an MBR with one partition: as small as a valid whole-disk image gets. */
async function tinyImage(bytes: number): Promise<Buffer> {
  const path = join(work.dir, `tiny-${bytes}.img`);
  await writeFile(path, randomBytes(bytes));
  await execa('sfdisk', ['--quiet', '--no-reread', '--no-tell-kernel', path], { input: 'start=1, type=83\n' });
  return readFile(path);
}

const imageInfo = (urls: string[], extra: Record<string, unknown> = {}) => ({
  id: 'fin',
  urls,
  disk_format: 'raw',
  stream_raw_images: true,
  os_hash_algo: 'sha256',
  os_hash_value: digest,
  ...extra,
});

describe('an answer with its FIN arriving while the agent is behind (nodejs/undici#5360)', () => {
  it('the image download, onto a disk throttled to 1 MiB/s, images of 192 KiB to 6 MiB', async () => {
    // On undici 7.30.2 the small ones died most reliably: their last bytes and the FIN arrive while the agent
    // is still clearing the disk's old signatures and has stopped reading.
    const images = [...(await Promise.all([192, 256, 320, 448].map((kib) => tinyImage(kib * 1024)))), image];
    server = await startRawHttpServer({ behaviour: () => 'close' });
    agent = await startAgentChild(loop.path, { throttle: { device: loop.path, bytesPerSecond: 1024 * 1024 } });
    for (const [i, data] of images.entries()) {
      const url = server.serve(`image-${i}.raw`, data);
      const sha = createHash('sha256').update(data).digest('hex');
      const r = await post('standby.prepare_image', { image_info: imageInfo([url], { os_hash_value: sha }) });
      expect(r.command_error, `${data.length} bytes`).toBeNull();
      expect(r.command_status).toBe('SUCCEEDED');
      expect((await readDevice(loop.path, 0, data.length)).equals(data)).toBe(true);
      await expectServing();
    }
  });

  it('the checksum URL, a 768 KiB checksum file', async () => {
    // A mirror's SHA256SUMS: many other files' lines, ours last.
    const lines = Array.from({ length: 8000 }, (_, i) => `${randomBytes(32).toString('hex')}  other-${i}.img`);
    const sums = `${lines.join('\n')}\n${digest}  image.raw\n`;
    server = await startRawHttpServer({
      behaviour: (req) => (req.path === '/SHA256SUMS' ? 'close' : 'keep-alive'),
      around: stopAgentAround('SHA256SUMS'),
    });
    const url = server.serve('image.raw', image);
    const sumsUrl = server.serve('SHA256SUMS', sums);
    agent = await startAgentChild(loop.path);
    const r = await post('standby.prepare_image', { image_info: imageInfo([url], { os_hash_value: sumsUrl }) });
    // Larger than the agent's 1 MiB limit for a checksum file would be another test; this one must succeed.
    expect(sums.length).toBeLessThan(1024 * 1024);
    expect(r.command_error).toBeNull();
    expect(r.command_status).toBe('SUCCEEDED');
    await expectServing();
  });

  it('the config-drive URL, a 1 MiB ISO', async () => {
    const iso = await buildIso({
      'openstack/latest/meta_data.json': '{"uuid": "fin"}',
      'openstack/latest/user_data': randomBytes(1024 * 1024),
    });
    server = await startRawHttpServer({
      behaviour: (req) => (req.path === '/config-drive.iso' ? 'close' : 'keep-alive'),
      around: stopAgentAround('config-drive.iso'),
    });
    const url = server.serve('image.raw', image);
    const driveUrl = server.serve('config-drive.iso', iso);
    agent = await startAgentChild(loop.path);
    const r = await post('standby.prepare_image', { image_info: imageInfo([url]), configdrive: driveUrl });
    expect(r.command_error).toBeNull();
    expect(r.command_status).toBe('SUCCEEDED');
    await expectServing();
  });
});
