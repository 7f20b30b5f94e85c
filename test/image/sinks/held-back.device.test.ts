// The worst moment to be killed: every byte of the image on the device but the held-back ones (each sink's
// `finish` resolved, `commit` not yet called). The image here fills the device exactly, so its backup GPT sits
// on the device's last LBA, where sgdisk would rebuild the table from it. Before commit no tool finds a table
// on the device, old or new; after commit the device holds the image, byte for byte. Every write route's sink.
import { open, readFile, readdir, stat, writeFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConfig } from '../../../agent/config/config.ts';
import { INSPECT_HEAD_BYTES } from '../../../agent/image/inspect.ts';
import { BlockDeviceSink } from '../../../agent/image/sinks/block-device.ts';
import { DecoderPipe } from '../../../agent/image/sinks/decoder-pipe.ts';
import { DeviceTarget } from '../../../agent/image/sinks/device-target.ts';
import { Qcow2Sink } from '../../../agent/image/sinks/qcow2.ts';
import { QemuImgSink } from '../../../agent/image/sinks/qemu-img.ts';
import type { Sink } from '../../../agent/image/sinks/sink.ts';
import { nullLogger } from '../../../agent/log.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';
import { readDevice } from '../../helpers/image-agent.ts';
import { MiB, withLoops, type LoopDevice } from '../../helpers/loop.ts';
import { compress, makeDiskImage, toQcow2, workDir } from '../../helpers/make-image.ts';

const SIZE = 16 * MiB;
const config = buildConfig(new Map(), new Map([['standalone', 'true']]));
let work: Awaited<ReturnType<typeof workDir>>;
let raw: string;
let image: Buffer;

beforeAll(async () => {
  work = await workDir('ina-held-');
  raw = (await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: SIZE / MiB, randomKiB: 8 * 1024 })).path;
  image = await readFile(raw);
});
afterAll(async () => work?.cleanup());

function pieces(data: Buffer, size = 100 * 1024 + 7): AsyncIterable<Buffer> {
  return (async function* () {
    for (let at = 0; at < data.length; at += size) yield Buffer.from(data.subarray(at, at + size));
  })();
}

async function tablesFound(dev: string): Promise<string[]> {
  const found: string[] = [];
  const blkid = await execa('blkid', ['-p', '-o', 'export', dev], { reject: false });
  if (blkid.exitCode !== 2) found.push(`blkid -p: ${blkid.stdout}`);
  const wipefs = await execa('wipefs', [dev], { reject: false });
  if (wipefs.stdout.trim()) found.push(`wipefs: ${wipefs.stdout}`);
  const sgdisk = await execa('sgdisk', ['-v', dev], { reject: false });
  if (!/Creating new GPT entries/.test(sgdisk.stdout)) found.push(`sgdisk -v: ${sgdisk.stdout.slice(0, 300)}`);
  await execa('blockdev', ['--rereadpt', dev], { reject: false });
  const name = basename(dev);
  const parts = (await readdir(`/sys/block/${name}`)).filter((n) => n.startsWith(`${name}p`));
  if (parts.length > 0) found.push(`kernel: ${parts.join(' ')}`);
  return found;
}

async function onLoop(body: (target: DeviceTarget, loop: LoopDevice) => Promise<Sink<never>>): Promise<void> {
  await withLoops([SIZE], async ([loop]) => {
    // An old table, which clearing removes before the first byte.
    await execa('sgdisk', ['-o', '-n', '1:2048:+4M', loop!.path]);
    const target = new DeviceTarget(
      { path: loop!.path, size: SIZE, logicalSectorSize: 512 },
      new DeviceGuard([loop!.path]),
      nullLogger,
    );
    const sink = await body(target, loop!);
    try {
      expect(await tablesFound(loop!.path)).toEqual([]);
      expect((await readDevice(loop!.path, SIZE - MiB, SIZE)).equals(Buffer.alloc(MiB))).toBe(true);
      await sink.commit();
    } finally {
      await sink.release();
    }
    expect((await readDevice(loop!.path, 0, SIZE)).equals(image)).toBe(true);
    expect((await execa('sgdisk', ['-v', loop!.path])).stdout).toMatch(/No problems found/);
  });
}

describe('the image ends at the device end; killed after finish, before commit', () => {
  it('block writer (raw)', async () => {
    await onLoop(async (target) => {
      const sink = await BlockDeviceSink.open(target, { inspected: false });
      await sink.checkHead(image.subarray(0, sink.headBytes), { totalBytes: image.length, compression: 'none' });
      await sink.write(pieces(image));
      expect((await sink.finish()).head.equals(image.subarray(0, INSPECT_HEAD_BYTES))).toBe(true);
      return sink as Sink<never>;
    });
  });

  it('decoder pipe (gzip)', async () => {
    const packed = await readFile(await compress(raw, 'gzip'));
    await onLoop(async (target) => {
      const sink = await DecoderPipe.start('gzip', target);
      await sink.checkHead(image.subarray(0, sink.headBytes), { totalBytes: packed.length, compression: 'gzip' });
      await sink.write(pieces(packed));
      const result = await sink.finish();
      expect(result.bytes).toBe(image.length);
      expect(result.head.equals(image.subarray(0, INSPECT_HEAD_BYTES))).toBe(true);
      return sink as Sink<never>;
    });
  });

  it('qcow2 reader (streamed qcow2)', async () => {
    const qcow2 = await readFile(await toQcow2(raw));
    await onLoop(async (target) => {
      const sink = await Qcow2Sink.open('none', target, 'qcow2', config.image);
      await sink.checkHead(qcow2.subarray(0, sink.headBytes), { totalBytes: qcow2.length, compression: 'none' });
      await sink.write(pieces(qcow2));
      expect((await sink.finish()).head.equals(image.subarray(0, INSPECT_HEAD_BYTES))).toBe(true);
      return sink as Sink<never>;
    });
  });

  it('qemu-img convert (buffered qcow2)', async () => {
    const file = await toQcow2(raw, `${raw}.conv.qcow2`);
    await onLoop(async (target) => {
      const progress: number[] = [];
      const sink = new QemuImgSink(target, 1024, (bytes) => progress.push(bytes));
      await sink.checkHead();
      await sink.write({ file, format: 'qcow2', virtualSize: image.length });
      expect((await sink.finish()).head.equals(image.subarray(0, INSPECT_HEAD_BYTES))).toBe(true);
      expect(progress.at(-1)).toBe(image.length);
      // The two ends went through files beside the buffer, which are gone.
      await expect(stat(`${file}.head`)).rejects.toThrow(/ENOENT/);
      await expect(stat(`${file}.tail`)).rejects.toThrow(/ENOENT/);
      return sink as Sink<never>;
    });
  });

  it('qemu-img, from a qcow2 whose header size is not a multiple of 512 (qemu counts it in whole sectors)', async () => {
    const part = image.subarray(0, 10 * MiB);
    const src = join(work.dir, 'odd.raw');
    await writeFile(src, part);
    const file = await toQcow2(src, `${src}.qcow2`);
    const fh = await open(file, 'r+');
    const header = Buffer.alloc(8);
    header.writeBigUInt64BE(BigInt(part.length + 100));
    await fh.write(header, 0, 8, 24);
    await fh.close();
    await withLoops([SIZE], async ([loop]) => {
      const target = new DeviceTarget(
        { path: loop!.path, size: SIZE, logicalSectorSize: 512 },
        new DeviceGuard([loop!.path]),
        nullLogger,
      );
      const sink = new QemuImgSink(target, 1024, () => undefined);
      try {
        await sink.checkHead();
        await sink.write({ file, format: 'qcow2', virtualSize: part.length + 100 });
        await sink.finish();
        await sink.commit();
      } finally {
        await sink.release();
      }
      expect((await readDevice(loop!.path, 0, part.length)).equals(part)).toBe(true);
    });
  });
});
