// What can be known before writing is checked before writing: a qcow2 whose tables point past its end (a
// truncated file) is refused before conversion, with the disk untouched. A qcow2 streamed straight onto the disk
// (the default route) cannot look at its end first: there the same images fail as they arrive, and the disk is
// left with nothing bootable (untouched, or its head cleared by the sink's wipe).
import { createHash } from 'node:crypto';
import { open, readFile, truncate } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { isPainted, paint, readDevice, runToEnd, startImageAgent } from './helpers/image-agent.ts';
import { startImageServer, type ImageServer } from './helpers/image-server.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from './helpers/loop.ts';
import { makeDiskImage, toQcow2, workDir } from './helpers/make-image.ts';

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

/** The buffered route (qemu-img after the prechecks), where every check below runs before the disk changes. */
const BUFFERED = { 'ina-qcow2-stream-spool': '0' };

async function deployQcow2(file: string, flags: Record<string, string> = BUFFERED) {
  const url = await images.serveFile(`${Math.random()}.qcow2`, file);
  const digest = createHash('sha256').update(await readFile(file)).digest('hex');
  const a = await startImageAgent(loop.path, flags);
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
    const qcow2 = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'trunc' })).path);
    const whole = (await readFile(qcow2)).length;
    await truncate(qcow2, Math.floor(whole / 2));
    await paint(loop.path, loop.sizeBytes);
    const r = await deployQcow2(qcow2);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'InvalidImage' });
    expect(r.command_error!.details).toMatch(/the qcow2 image is truncated: its (L2 table|data cluster) \S+ reaches byte \d+, past the end of the \d+-byte file/);
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
    expect(r.command_error).toMatchObject({ type: 'InvalidImage', details: "the qcow2 image's cluster size (2^40 bytes) is outside 512 B to 2 MiB" });
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });

  it('streamed, the truncated qcow2 and the impossible cluster size fail too, and leave nothing bootable', async () => {
    const truncated = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'trunc-s' })).path);
    await truncate(truncated, Math.floor((await readFile(truncated)).length / 2));
    const bits = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 8, name: 'bits-s' })).path);
    const fh = await open(bits, 'r+');
    try {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(40);
      await fh.write(b, 0, 4, 20);
    } finally {
      await fh.close();
    }
    for (const file of [truncated, bits]) {
      await paint(loop.path, loop.sizeBytes);
      const r = await deployQcow2(file, {});
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error).toMatchObject({ type: 'InvalidImage' });
      const head = await readDevice(loop.path, 0, MiB);
      expect((await isPainted(loop.path, loop.sizeBytes)) || head.every((b) => b === 0), r.command_error!.details).toBe(true);
    }
  });

  it('the same image whole is deployed', async () => {
    const qcow2 = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 16, randomKiB: 8 * 1024, name: 'whole' })).path);
    for (const flags of [BUFFERED, {}]) {
      const r = await deployQcow2(qcow2, flags);
      expect(r.command_status, JSON.stringify(r.command_error)).toBe('SUCCEEDED');
    }
  });
});
