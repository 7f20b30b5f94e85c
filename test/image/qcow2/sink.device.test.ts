// The streamed qcow2 sink onto real loop devices (512-byte and 4K-sector), byte for byte against `qemu-img
// convert -O raw`; the device outside the image's virtual size must keep its paint (no write beyond it).
import { readFile } from 'node:fs/promises';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildConfig } from '../../../agent/config/config.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';
import { DeviceTarget } from '../../../agent/image/sinks/device-target.ts';
import { Qcow2Sink } from '../../../agent/image/sinks/qcow2.ts';
import { PositionalWriter } from '../../../agent/image/qcow2/positional-writer.ts';
import { readDevice } from '../../helpers/image-agent.ts';
import { withLoops } from '../../helpers/loop.ts';
import { workDir } from '../../helpers/make-image.ts';
import { buildImage, content, KiB, MiB, referenceRaw, type Spec } from '../../helpers/qcow2-corpus.ts';
import { mkdir, open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { LogRing } from '../../../agent/log.ts';

let dir: string;
let cleanup: () => Promise<void>;
beforeAll(async () => ({ dir, cleanup } = await workDir('ina-qcow2-dev-')));
afterAll(async () => cleanup());

const DEVICE = 40 * MiB;
const config = buildConfig(new Map(), new Map([['standalone', 'true']]));
const odd = 24 * MiB + 3 * 512;
const writes = [
  { offset: 20 * MiB, length: 300 * KiB + 512 },
  { offset: 512, length: 8 * KiB },
  { offset: 6 * MiB + 512, length: 2 * MiB },
  { offset: odd - 1024, length: 1024 },
];
const specs: Spec[] = [
  { name: 'c512', virtualSize: odd, options: 'cluster_size=512', writes },
  { name: 'c64k', virtualSize: odd, options: 'cluster_size=65536', writes },
  { name: 'c2m-extl2', virtualSize: odd, options: 'cluster_size=2097152,extended_l2=on', writes },
  {
    name: 'zstd',
    virtualSize: 0,
    options: 'compression_type=zstd',
    convert: { raw: content(5 * MiB + 512, 3), compress: true },
  },
  {
    name: 'resized',
    virtualSize: 4 * MiB,
    options: 'cluster_size=4096',
    writes: [{ offset: 1 * MiB, length: 1 * MiB }],
    resizeTo: odd,
  },
];

async function paintAll(path: string, size: number): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    const block = Buffer.alloc(MiB, 0x5c);
    for (let at = 0; at < size; at += MiB) await fh.write(block, 0, MiB, at);
    await fh.datasync();
  } finally {
    await fh.close();
  }
}

/** Streams `spec`'s image through the sink onto a painted loop device and compares it with qemu-img's bytes. */
async function streamOnto(spec: Spec, sectorSize: number, log = pino({ level: 'silent' })): Promise<void> {
  const file = await buildImage(dir, { ...spec, name: `${spec.name}-${sectorSize}` });
  const image = await readFile(file);
  const reference = await referenceRaw(file, dir);
  await withLoops(
    [DEVICE],
    async ([dev]) => {
      await paintAll(dev!.path, DEVICE);
      const target = new DeviceTarget(
        { path: dev!.path, size: DEVICE, logicalSectorSize: sectorSize },
        new DeviceGuard([dev!.path]),
        log,
      );
      const sink = await Qcow2Sink.open('none', target, 'qcow2', config.image);
      try {
        await sink.checkHead(image.subarray(0, sink.headBytes), { totalBytes: image.length, compression: 'none' });
        await sink.write(
          (async function* () {
            for (let at = 0; at < image.length; at += 100 * KiB + 7) yield image.subarray(at, at + 100 * KiB + 7);
          })(),
        );
        const result = await sink.finish();
        expect(result.bytes).toBe(reference.length);
        expect(result.head.equals(reference.subarray(0, result.head.length))).toBe(true);
        // The guest's first MiB is held back until commit: before it, the device's head is blank.
        expect((await readDevice(dev!.path, 0, MiB)).equals(Buffer.alloc(MiB))).toBe(true);
        await sink.commit();
      } finally {
        await sink.release();
      }
      expect((await readDevice(dev!.path, 0, reference.length)).equals(reference)).toBe(true);
      // Between the image's end and the last MiB (which clearing the signatures zeroes), the paint is intact.
      const beyond = await readDevice(dev!.path, reference.length, DEVICE - MiB);
      expect(beyond.equals(Buffer.alloc(beyond.length, 0x5c))).toBe(true);
    },
    { sectorSize },
  );
}

describe.each([512, 4096])('streamed qcow2 onto a %i-byte-sector loop device', (sectorSize) => {
  it.each(specs.map((s) => [s.name, s] as const))('%s', async (_name, spec) => streamOnto(spec, sectorSize));
});

describe('a device that will not zero a range itself (blkdiscard fails)', () => {
  it('gets the zeros written instead, the same bytes, with a warning', async () => {
    const bin = join(dir, 'failing-bin');
    await mkdir(bin, { recursive: true });
    await writeFile(
      join(bin, 'blkdiscard'),
      '#!/bin/sh\necho "BLKZEROOUT ioctl failed: Operation not supported" >&2\nexit 1\n',
      { mode: 0o755 },
    );
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    const ring = new LogRing();
    try {
      await streamOnto({ ...specs[1]!, name: 'no-zeroout' }, 512, pino({ base: null }, ring));
    } finally {
      process.env.PATH = path;
    }
    expect(
      ring.tail().filter((l) => l.includes('the device would not zero a range itself; writing the zeros instead')),
    ).toHaveLength(1);
  });
});

describe('a zeroing batch still running when the deploy stops (a disk that writes its zeros slowly)', () => {
  it('is stopped by release(), its blkdiscard with it, instead of being waited for', async () => {
    const bin = join(dir, 'slow-bin');
    await mkdir(bin, { recursive: true });
    const pids = join(dir, 'slow-blkdiscard.pids');
    await writeFile(join(bin, 'blkdiscard'), `#!/bin/sh\necho $$ >> ${pids}\nexec sleep 300\n`, { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      await withLoops([DEVICE], async ([loop]) => {
        const writer = await PositionalWriter.open(
          loop!.path,
          DEVICE,
          new DeviceGuard([loop!.path]),
          pino({ level: 'silent' }),
        );
        await writer.zero(0, 16 * MiB);
        for (let i = 0; !(await readFile(pids, 'utf8').catch(() => '')) && i < 100; i++)
          await new Promise((r) => setTimeout(r, 50));
        const pid = Number((await readFile(pids, 'utf8')).trim());
        const started = Date.now();
        await writer.release();
        expect(Date.now() - started, 'release() waited for the zeroing').toBeLessThan(10_000);
        let alive = true;
        for (let i = 0; alive && i < 100; i++) {
          alive = await readFile(`/proc/${pid}/stat`, 'utf8').then(
            (s) => !/^\d+ \(.*\) Z/.test(s),
            () => false,
          );
          if (alive) await new Promise((r) => setTimeout(r, 50));
        }
        expect(alive, 'the zeroing tool outlived the writer').toBe(false);
      });
    } finally {
      process.env.PATH = path;
    }
  });
});
