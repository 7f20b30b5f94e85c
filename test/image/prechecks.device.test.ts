// What can be known before writing is checked before writing: a buffered qcow2 whose tables point past its
// end (a truncated file) is refused before conversion, with the disk untouched. The streamed qcow2 route has
// its own reader's checks (test/image/qcow2/hostile.device.test.ts); here it must only never report the truncated image
// deployed.
import { createHash } from 'node:crypto';
import { open, readFile, truncate } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPainted, paint, runToEnd, startImageAgent } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import { makeDiskImage, toQcow2, workDir } from '../helpers/make-image.ts';

let loop: LoopDevice;
let work: Awaited<ReturnType<typeof workDir>>;
let images: ImageServer;

beforeAll(async () => {
  work = await workDir();
  images = await startImageServer();
  loop = await attachLoop(32 * MiB);
});
afterAll(async () => {
  await images?.close();
  if (loop) await detachLoop(loop);
  await work?.cleanup();
});

/** The buffered route (qemu-img after inspection) unless `streamed`. */
async function deployQcow2(file: string, streamed = false) {
  const url = await images.serveFile(`${Math.random()}.qcow2`, file);
  const digest = createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
  const a = await startImageAgent(loop.path, streamed ? {} : { 'ina-qcow2-stream-spool': '0' });
  try {
    return await runToEnd(a.url, 'standby.prepare_image', {
      image_info: { id: 'q', urls: [url], os_hash_algo: 'sha256', os_hash_value: digest, disk_format: 'qcow2' },
    });
  } finally {
    await a.close();
  }
}

describe('checks made before writing', () => {
  it('a truncated qcow2 (served whole, with its own checksum) is refused before conversion; the disk is untouched', async () => {
    const qcow2 = await toQcow2(
      (await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'trunc' })).path,
    );
    const whole = (await readFile(qcow2)).length;
    await truncate(qcow2, Math.floor(whole / 2));
    await paint(loop.path, loop.sizeBytes);
    const r = await deployQcow2(qcow2);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'InvalidImage' });
    expect(r.command_error!.details).toMatch(
      /the qcow2 image is truncated: its (L2 table|data cluster) \S+ reaches byte \d+, past the end of the \d+-byte file/,
    );
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });

  it('a qcow2 whose header claims a cluster size qemu never writes is refused before conversion', async () => {
    const qcow2 = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 8, name: 'bits' })).path);
    const fh = await open(qcow2, 'r+');
    try {
      const bits = Buffer.alloc(4);
      bits.writeUInt32BE(40);
      await fh.write(bits, 0, 4, 20);
    } finally {
      await fh.close();
    }
    await paint(loop.path, loop.sizeBytes);
    const r = await deployQcow2(qcow2);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({
      type: 'InvalidImage',
      details: "the qcow2 image's cluster size (2^40 bytes) is outside 512 B to 2 MiB",
    });
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });

  it('the truncated qcow2 on the streamed route fails too, never SUCCEEDED', async () => {
    const qcow2 = await toQcow2(
      (await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'trunc-s' })).path,
    );
    await truncate(qcow2, Math.floor((await readFile(qcow2)).length / 2));
    const r = await deployQcow2(qcow2, true);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'InvalidImage' });
  });

  it('the same image whole is deployed', async () => {
    const qcow2 = await toQcow2(
      (await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'whole' })).path,
    );
    const r = await deployQcow2(qcow2);
    expect(r.command_status, JSON.stringify(r.command_error)).toBe('SUCCEEDED');
  });
});
