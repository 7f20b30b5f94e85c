// The config drive's room is judged from the image before the disk changes (#18 item 3): a full disk, four
// MBR primaries, an existing config-2 too small are refused with the disk untouched, from a buffered raw
// image and a buffered qcow2 (compressed too) alike. What the write would accept (an old config-2 big
// enough on a full disk) is not refused; a streamed image (raw, or qcow2 on its streaming route) whose
// labels lie beyond its head is judged after writing, as before.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildIso, toWire } from './helpers/configdrive.ts';
import { isPainted, paint, runToEnd, startImageAgent, type CommandJson } from './helpers/image-agent.ts';
import { startImageServer, type ImageServer } from './helpers/image-server.ts';
import { MiB, withLoops } from './helpers/loop.ts';
import { makeDiskImage, workDir } from './helpers/make-image.ts';

let work: Awaited<ReturnType<typeof workDir>>;
let images: ImageServer;
let drive: string;

beforeAll(async () => {
  work = await workDir();
  images = await startImageServer();
  drive = toWire(await buildIso());
});
afterAll(async () => {
  await images?.close();
  await work?.cleanup();
});

/**
 * Deploys `file` with the config drive onto a fresh painted loop device of `diskBytes`; returns the result and whether
 * the disk is untouched.
 */
async function deploy(
  file: string,
  diskBytes: number,
  info: Record<string, unknown>,
  configdrive = drive,
  flags: Record<string, string> = BUFFERED,
): Promise<{ r: CommandJson; untouched: boolean; p2Label: string }> {
  const url = await images.serveFile(`${Math.random()}-${file.split('/').at(-1)}`, file);
  const digest = createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
  return withLoops([diskBytes], async ([loop]) => {
    await paint(loop!.path, loop!.sizeBytes);
    const a = await startImageAgent(loop!.path, flags);
    try {
      const r = await runToEnd(a.url, 'standby.prepare_image', {
        image_info: { id: 'room', urls: [url], os_hash_algo: 'sha256', os_hash_value: digest, ...info },
        configdrive,
      });
      const p2 = await execa('blkid', ['-p', '-o', 'value', '-s', 'LABEL', `${loop!.path}p2`], { reject: false });
      return { r, untouched: await isPainted(loop!.path, loop!.sizeBytes), p2Label: p2.stdout.trim() };
    } finally {
      await a.close();
    }
  });
}

/** A FAT filesystem labelled CONFIG-2 of `kib` KiB written into partition `at` (bytes) of `image`. */
async function putConfig2(image: string, at: number, kib: number): Promise<void> {
  const fat = join(work.dir, `fat-${Math.random()}`);
  await execa('mkfs.vfat', ['-C', '-n', 'CONFIG-2', fat, String(kib)]);
  await execa('dd', [`if=${fat}`, `of=${image}`, 'bs=1K', `seek=${at / 1024}`, 'conv=notrunc', 'status=none']);
}

const BUFFERED_RAW = { disk_format: 'raw', stream_raw_images: false };
/** qcow2 takes the buffered route (its streaming route off). */
const BUFFERED: Record<string, string> = { 'ina-qcow2-stream-spool': '0' };
const refusedBefore = /^Config drive cannot be written to \/dev\/loop\d+: .*; refused before writing the image$/;

describe('the config drive room, checked before writing', { timeout: 120_000 }, () => {
  it('a GPT image as large as the disk (buffered raw): no room, refused with the disk untouched', async () => {
    const img = await makeDiskImage(work.dir, { sizeMiB: 40, name: 'full.raw' });
    const { r, untouched } = await deploy(img.path, 40 * MiB, BUFFERED_RAW);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'ConfigDriveError' });
    expect(r.command_error!.details).toMatch(refusedBefore);
    expect(r.command_error!.details).toMatch(
      /no room for a 64 MiB config drive partition .* its largest free region holds 1\.0 MiB, and no partition of it is labelled "config-2"/,
    );
    expect(untouched).toBe(true);
  });

  it('the same image as a compressed qcow2, buffered: read through its tables, refused with the disk untouched', async () => {
    const img = await makeDiskImage(work.dir, { sizeMiB: 40, name: 'fullc.raw' });
    const qcow2 = `${img.path}.qcow2`;
    await execa('qemu-img', ['convert', '-q', '-c', '-f', 'raw', '-O', 'qcow2', img.path, qcow2]);
    const { r, untouched } = await deploy(qcow2, 40 * MiB, { disk_format: 'qcow2' });
    expect(r.command_error?.details).toMatch(refusedBefore);
    expect(r.command_error!.details).toMatch(/no room for a 64 MiB config drive partition/);
    expect(untouched).toBe(true);
  });

  it('an MBR image with four primary partitions: refused with the disk untouched, though the disk has room', async () => {
    const file = join(work.dir, 'four.raw');
    await execa('truncate', ['-s', '48M', file]);
    const mk = (a: number, b: number) => ['mkpart', 'primary', 'ext4', `${a}MiB`, `${b}MiB`];
    await execa('parted', ['-s', file, 'mklabel', 'msdos', ...mk(1, 12), ...mk(12, 24), ...mk(24, 36), ...mk(36, 47)]);
    const { r, untouched } = await deploy(file, 200 * MiB, BUFFERED_RAW);
    expect(r.command_error?.details).toMatch(refusedBefore);
    expect(r.command_error!.details).toMatch(
      /the image uses MBR partitioning and already has 4 primary partitions, and no partition of it is labelled "config-2"/,
    );
    expect(untouched).toBe(true);
  });

  it('an image whose own config-2 partition is too small for the drive (buffered qcow2): refused with the disk untouched', async () => {
    const file = join(work.dir, 'small-c2.raw');
    await execa('truncate', ['-s', '40M', file]);
    await execa('sgdisk', ['-n', '1:2048:+30M', '-n', '2:0:+2M', file]);
    const start = Number((await execa('sgdisk', ['-i', '2', file])).stdout.match(/First sector: (\d+)/)![1]) * 512;
    await putConfig2(file, start, 2048);
    const qcow2 = `${file}.qcow2`;
    await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', file, qcow2]);
    const big = toWire(await buildIso({ 'openstack/latest/user_data': Buffer.alloc(3 * MiB, 1) }));
    const { r, untouched } = await deploy(qcow2, 200 * MiB, { disk_format: 'qcow2' }, big);
    expect(r.command_error?.details).toMatch(refusedBefore);
    expect(r.command_error!.details).toMatch(
      /the config drive \(\d+ bytes\) does not fit the image's config-2 partition 2 \(2097152 bytes\)/,
    );
    expect(untouched).toBe(true);
  });

  it('a full disk whose image has a config-2 big enough is not refused: the drive goes there', async () => {
    const img = await makeDiskImage(work.dir, { sizeMiB: 40, name: 'reuse.raw' });
    // The image's one partition ends 1 MiB before its end: shrink it and put a 4 MiB config-2 behind it.
    await execa('sgdisk', ['-d', '1', '-n', '1:2048:+32M', '-n', '2:0:+4M', img.path]);
    const start = Number((await execa('sgdisk', ['-i', '2', img.path])).stdout.match(/First sector: (\d+)/)![1]) * 512;
    await putConfig2(img.path, start, 4096);
    const { r, p2Label } = await deploy(img.path, 40 * MiB, BUFFERED_RAW);
    expect(r.command_status, JSON.stringify(r.command_error)).toBe('SUCCEEDED');
    // The ISO drive replaced the old FAT one in the same partition.
    expect(p2Label).toBe('config-2');
  });

  it.each([
    ['raw', { disk_format: 'raw', stream_raw_images: true }],
    ['qcow2', { disk_format: 'qcow2' }],
  ])(
    'streamed %s, the labels lie beyond the head: the same full disk is judged after writing, as before',
    async (kind, info) => {
      const img = await makeDiskImage(work.dir, { sizeMiB: 40, name: `fulls-${kind}.raw` });
      const file = kind === 'raw' ? img.path : `${img.path}.qcow2`;
      if (kind === 'qcow2') await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', img.path, file]);
      const { r, untouched } = await deploy(file, 40 * MiB, info, drive, {});
      expect(r.command_error).toMatchObject({ type: 'ConfigDriveError' });
      expect(r.command_error!.details).toMatch(/^No room for a 64 MiB config drive partition/);
      expect(untouched).toBe(false);
    },
  );
});
