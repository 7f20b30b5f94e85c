import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { deflateRawSync } from 'node:zlib';
import { execa } from 'execa';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LogRing } from '../../../agent/log.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../../helpers/loop.ts';
import { deployFile, isPainted, paint, readDevice } from '../../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../../helpers/image-server.ts';
import { compress, makeDiskImage, workDir, type DiskImage } from '../../helpers/make-image.ts';

let loop: LoopDevice;
let server: ImageServer;
/** Answers without Accept-Ranges, as `python3 -m http.server` and Ironic's conductor-side server may. */
let noRanges: ImageServer;
let work: Awaited<ReturnType<typeof workDir>>;
let disk: DiskImage;
let base: Buffer;

beforeAll(async () => {
  work = await workDir('ina-qcow2-hostile-');
  disk = await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 8, randomKiB: 3 * 1024 });
  const file = join(work.dir, 'base.qcow2');
  await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', disk.path, file]);
  base = await readFile(file);
  server = await startImageServer();
  noRanges = await startImageServer({ ranges: false });
  loop = await attachLoop(16 * MiB);
});

beforeEach(async () => {
  await paint(loop.path, loop.sizeBytes);
});

afterAll(async () => {
  await detachLoop(loop);
  await server.close();
  await noRanges.close();
  await work.cleanup();
});

async function deploy(
  image: Buffer,
  flags: Record<string, string> = {},
  ring?: LogRing,
  name = `${Math.random().toString(16).slice(2)}.qcow2`,
  from = server,
) {
  const file = join(work.dir, name);
  await writeFile(file, image);
  return deployFile(from, loop.path, file, { disk_format: 'qcow2' }, { flags, ring, name });
}

const field = { l1Size: 36, l1Offset: 40, reftableOffset: 48, size: 24 };
function patched(edit: (b: Buffer) => void, from = base): Buffer {
  const b = Buffer.from(from);
  edit(b);
  return b;
}
const l1Offset = (b: Buffer) => Number(b.readBigUInt64BE(field.l1Offset));
const l2Offset = (b: Buffer) => Number(b.readBigUInt64BE(l1Offset(b)) & 0x00fffffffffffe00n);
/** Indexes of the first L2 table's allocated data entries. */
function dataEntries(b: Buffer): number[] {
  const l2 = l2Offset(b);
  const found: number[] = [];
  for (let i = 0; i < 8192; i++) if ((b.readBigUInt64BE(l2 + i * 8) & 0x00fffffffffffe00n) !== 0n) found.push(i);
  return found;
}

describe('refused before the device is touched (the header shows it)', () => {
  const cases: [string, () => Buffer, string, RegExp][] = [
    [
      'its L1 table over the header',
      () => patched((b) => b.writeBigUInt64BE(0n, field.l1Offset)),
      'InvalidImage',
      /L1 table offset 0 is not a cluster boundary after the header/,
    ],
    [
      'its L1 table over the refcount table',
      () => patched((b) => b.writeBigUInt64BE(b.readBigUInt64BE(field.reftableOffset), field.l1Offset)),
      'InvalidImage',
      /the L1 table and the refcount table overlap/,
    ],
    [
      'an L1 table that would exhaust memory',
      () => patched((b) => b.writeUInt32BE(0x4000000, field.l1Size)),
      'InvalidImage',
      /L1 table \(67108864 entries\) is larger than qemu allows/,
    ],
    [
      'a virtual size larger than the disk',
      () => patched((b) => b.writeBigUInt64BE(1n << 40n, field.size)),
      'ImageWriteError',
      /virtual size \(1099511627776 bytes\) is larger than/,
    ],
    [
      'a virtual size its L1 table cannot map',
      () => patched((b) => b.writeUInt32BE(0, field.l1Size)),
      'InvalidImage',
      /L1 table \(0 entries\) cannot map the \d+ bytes its header states/,
    ],
    [
      'a declared length shorter than its tables need',
      () => patched((b) => b.writeBigUInt64BE(BigInt(Math.ceil((b.length + MiB) / 65536) * 65536), field.l1Offset)),
      'InvalidImage',
      /tables end at byte \d+, beyond its declared length/,
    ],
  ];
  it.each(cases)('%s', async (_name, make, type, details) => {
    const r = await deploy(make());
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe(type);
    expect(r.command_error!.details).toMatch(details);
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });
});

async function expectFailedAndCleared(r: Awaited<ReturnType<typeof deploy>>, details: RegExp): Promise<void> {
  expect(r.command_status).toBe('FAILED');
  expect(r.command_error!.type).toBe('InvalidImage');
  expect(r.command_error!.details).toMatch(details);
  expect((await readDevice(loop.path, 0, MiB)).equals(Buffer.alloc(MiB))).toBe(true);
  const parted = await execa('parted', ['-s', '-m', loop.path, 'print'], { reject: false });
  expect(parted.stdout + parted.stderr).toMatch(/unrecognised disk label/i);
}

describe('failed, and the disk left without a label (only later bytes show it)', () => {
  it('two L2 entries claiming one host cluster', async () => {
    const image = patched((b) => {
      const [first, , , second] = dataEntries(b);
      b.writeBigUInt64BE(b.readBigUInt64BE(l2Offset(b) + first! * 8), l2Offset(b) + second! * 8);
    });
    await expectFailedAndCleared(await deploy(image), /claimed twice/);
  });

  it('an L2 entry pointing into the L1 table', async () => {
    const image = patched((b) =>
      b.writeBigUInt64BE(BigInt(l1Offset(b)) | (1n << 63n), l2Offset(b) + dataEntries(b)[1]! * 8),
    );
    await expectFailedAndCleared(await deploy(image), /lies over the L1 table/);
  });

  it('a truncated file (the server declares the short length: its table maps clusters beyond it)', async () => {
    await expectFailedAndCleared(
      await deploy(base.subarray(0, Math.floor(base.length * 0.7))),
      /lies beyond its declared length of \d+ bytes/,
    );
  });

  it('a truncated file inside gzip (no declared length)', async () => {
    const cut = join(work.dir, 'cut.qcow2');
    await writeFile(cut, base.subarray(0, Math.floor(base.length * 0.7)));
    const packed = await readFile(await compress(cut, 'gzip'));
    await expectFailedAndCleared(await deploy(packed, {}, undefined, 'cut.qcow2.gz'), /it is truncated/);
  });

  it('a compressed cluster that inflates beyond one cluster', async () => {
    const file = join(work.dir, 'compressed.qcow2');
    await execa('qemu-img', ['convert', '-q', '-c', '-f', 'raw', '-O', 'qcow2', disk.path, file]);
    const image = patched(
      (b) => {
        const l2 = l2Offset(b);
        for (let i = 8; i < 8192; i++) {
          const e = b.readBigUInt64BE(l2 + i * 8);
          if (!(e & (1n << 62n))) continue;
          const host = Number(e & ((1n << 54n) - 1n));
          const bomb = deflateRawSync(Buffer.alloc(4 * 65536, 0x61));
          const room = Number((e >> 54n) & 0xffn) * 512 + 512 - (host % 512);
          if (bomb.length > room) continue;
          bomb.copy(b, host);
          return;
        }
        throw new Error('no compressed cluster with room for the bomb');
      },
      await readFile(file),
    );
    await expectFailedAndCleared(await deploy(image), /inflates beyond one cluster/);
  });
});

describe('what the reader cannot take goes the buffered route', () => {
  it('an image with an internal snapshot: refused for streaming at its header, deployed from the buffer, said in the log and the progress', async () => {
    // MBR: the agent moves a GPT's backup header to the disk's end, which would differ from the reference.
    const mbr = await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 8, name: 'snap.raw', randomKiB: 2048 });
    const file = join(work.dir, 'snap.qcow2');
    await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', mbr.path, file]);
    await execa('qemu-img', ['snapshot', '-c', 'before', file]);
    await execa('qemu-io', ['-f', 'qcow2', '-c', 'write -P 0x77 1M 64K', file]);
    const reference = join(work.dir, 'snap.ref');
    await execa('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', file, reference]);
    const log = new LogRing();
    const r = await deploy(await readFile(file), {}, log);
    expect(r.command_error).toBeNull();
    const ref = await readFile(reference);
    expect((await readDevice(loop.path, 0, ref.length)).equals(ref)).toBe(true);
    const lines = log.tail().map((l) => JSON.parse(l) as Record<string, unknown>);
    expect(
      lines.find((l) => l.msg === 'the image cannot be streamed; downloading it again into the buffer')?.reason,
    ).toMatch(/internal snapshots/);
    expect(lines.find((l) => l.phase === 'convert' && typeof l.fallback === 'string')?.fallback).toMatch(
      /internal snapshots/,
    );
  });

  it.each([
    ['answers ranges', () => server],
    ['answers no ranges (the fallback must not be taken for a broken download)', () => noRanges],
  ])(
    'is deployed by the buffered path instead, which the log and the progress say; the server %s',
    async (_what, from) => {
      // 4 KiB clusters: one L1 entry maps 2 MiB. Growing the image past its L1 table moves the table to the
      // end of the file, after every L2 table and data cluster.
      const mbr = await makeDiskImage(work.dir, {
        table: 'mbr',
        sizeMiB: 16,
        name: 'late-l1.raw',
        randomKiB: 10 * 1024,
      });
      const head = join(work.dir, 'late-l1-head.raw');
      await writeFile(head, (await readFile(mbr.path)).subarray(0, 12 * MiB));
      const file = join(work.dir, 'late-l1.qcow2');
      await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', '-o', 'cluster_size=4096', head, file]);
      await execa('qemu-img', ['resize', '-q', '-f', 'qcow2', file, String(16 * MiB)]);
      const image = await readFile(file);
      expect(Number(image.readBigUInt64BE(field.l1Offset))).toBeGreaterThan(image.length - 64 * 1024);
      const reference = join(work.dir, 'late-l1.ref');
      await execa('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', file, reference]);

      const log = new LogRing();
      const r = await deploy(image, { 'ina-qcow2-stream-spool': '1' }, log, undefined, from());
      expect(r.command_error).toBeNull();
      expect(r.command_status).toBe('SUCCEEDED');
      const ref = await readFile(reference);
      expect((await readDevice(loop.path, 0, ref.length)).equals(ref)).toBe(true);
      const lines = log.tail().map((l) => JSON.parse(l) as Record<string, unknown>);
      expect(lines.some((l) => l.msg === 'the image cannot be streamed; downloading it again into the buffer')).toBe(
        true,
      );
      const download = lines.find((l) => l.phase === 'download' && typeof l.fallback === 'string');
      expect(download?.fallback).toMatch(
        /more data before its tables than the streaming spool may hold \(1048576 bytes\)/,
      );
      // With the default spool, the same image streams.
      const streamed = new LogRing();
      expect((await deploy(image, {}, streamed)).command_status).toBe('SUCCEEDED');
      expect(streamed.tail().some((l) => l.includes('qcow2 image placed by the streaming reader'))).toBe(true);
      expect((await readDevice(loop.path, 0, ref.length)).equals(ref)).toBe(true);
    },
  );
});
