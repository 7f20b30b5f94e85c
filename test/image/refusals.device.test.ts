// Images and parameters the agent must refuse, each before the device is written: the loop device is
// painted with a pattern first and must still carry it afterwards. And failures after writing began (a
// wrong checksum, a conversion that breaks halfway): they must leave nothing that looks like a disk label.
import { createHash } from 'node:crypto';
import { mkdtemp, open, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import { call } from '../helpers/api-harness.ts';
import {
  deployFile,
  isPainted,
  paint,
  readDevice,
  runCommand,
  runToEnd,
  startImageAgent,
} from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import {
  compress,
  makeDiskImage,
  qcow2WithBackingFile,
  qcow2WithDataFile,
  toQcow2,
  workDir,
  type DiskImage,
} from '../helpers/make-image.ts';

let loop: LoopDevice;
let server: ImageServer;
let work: Awaited<ReturnType<typeof workDir>>;
let small: DiskImage;

beforeAll(async () => {
  work = await workDir();
  small = await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 6 });
  server = await startImageServer();
  loop = await attachLoop(16 * MiB);
});

beforeEach(async () => {
  await paint(loop.path, loop.sizeBytes);
});

afterAll(async () => {
  await detachLoop(loop);
  await server.close();
  await work.cleanup();
});

async function sha256Of(file: string): Promise<string> {
  return createHash('sha256')
    .update(await readFile(file))
    .digest('hex');
}

function deploy(file: string, info: Record<string, unknown>, flags?: Record<string, string>) {
  return deployFile(server, loop.path, file, info, { flags });
}

/** Runs `body` with a fresh tmpfs of `size` mounted, or skips the test, saying why, where none can be mounted. */
async function withTmpfs(size: string, ctx: { skip(): void }, body: (dir: string) => Promise<void>): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), 'ina-tmpfs-'));
  const mounted = await execa('mount', ['-t', 'tmpfs', '-o', `size=${size}`, 'tmpfs', dir], { reject: false });
  if (mounted.exitCode !== 0) {
    console.warn(`skipped: cannot mount a tmpfs here (${mounted.stderr.trim()})`);
    await rm(dir, { recursive: true, force: true });
    ctx.skip();
  }
  try {
    await body(dir);
  } finally {
    await execa('umount', [dir], { reject: false });
    await rm(dir, { recursive: true, force: true });
  }
}

async function expectRefused(r: Awaited<ReturnType<typeof deploy>>, type: string, details: RegExp): Promise<void> {
  expect(r.command_status).toBe('FAILED');
  expect(r.command_error!.type).toBe(type);
  expect(r.command_error!.details).toMatch(details);
  expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
}

describe('refused before the device is written', () => {
  it('a qcow2 image with a backing file', async () => {
    const r = await deploy(await qcow2WithBackingFile(small.path), { disk_format: 'qcow2' });
    await expectRefused(r, 'InvalidImage', /backing file/);
  });

  it('a qcow2 image with an external data file', async () => {
    const r = await deploy(await qcow2WithDataFile(work.dir, 6), { disk_format: 'qcow2' });
    await expectRefused(r, 'InvalidImage', /external data file/);
  });

  it('a qcow2 image that claims to be raw, streamed or buffered', async () => {
    const qcow2 = await toQcow2(small.path);
    await expectRefused(
      await deploy(qcow2, { disk_format: 'raw', stream_raw_images: true }),
      'InvalidImage',
      /actually qcow2/,
    );
    await expectRefused(
      await deploy(qcow2, { disk_format: 'raw', stream_raw_images: false }),
      'InvalidImage',
      /actually qcow2/,
    );
  });

  it.each(['gzip', 'zstd', 'xz'] as const)('a %s-packed qcow2 image that claims to be raw, streamed', async (kind) => {
    const packed = await compress(await toQcow2(small.path, join(work.dir, `disguised-${kind}.qcow2`)), kind);
    await expectRefused(
      await deploy(packed, { disk_format: 'raw', stream_raw_images: true }),
      'InvalidImage',
      /actually qcow2/,
    );
  });

  // IPA's inspector calls these raw and writes them byte for byte; the agent refuses them untouched.
  it.each([true, false])('a bzip2-compressed image declared raw (stream_raw_images %s)', async (stream) => {
    const packed = join(work.dir, `disk-${stream}.raw.bz2`);
    await execa('sh', ['-c', 'bzip2 -c "$0" > "$1"', small.path, packed]);
    await expectRefused(
      await deploy(packed, { disk_format: 'raw', stream_raw_images: stream }),
      'InvalidImage',
      /safety check: the image is bzip2-compressed/,
    );
  });

  it.each([true, false])('a tar archive declared raw, plain or gzip-packed (stream_raw_images %s)', async (stream) => {
    const tar = join(work.dir, `disk-${stream}.tar`);
    await execa('tar', ['-cf', tar, '-C', work.dir, small.path.split('/').pop()!]);
    for (const file of [tar, await compress(tar, 'gzip')]) {
      await expectRefused(
        await deploy(file, { disk_format: 'raw', stream_raw_images: stream }),
        'InvalidImage',
        /safety check: the image is a tar archive/,
      );
    }
  });

  it('a raw image that claims to be qcow2', async () => {
    await expectRefused(
      await deploy(small.path, { disk_format: 'qcow2' }),
      'InvalidImage',
      /Expected format was qcow2, but image was actually raw/,
    );
  });

  it('an image larger than the disk, raw or qcow2', async () => {
    const big = await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 24, name: 'big.raw', randomKiB: 64 });
    await expectRefused(
      await deploy(big.path, { disk_format: 'raw', stream_raw_images: true }),
      'ImageWriteError',
      /larger than/,
    );
    await expectRefused(
      await deploy(await toQcow2(big.path), { disk_format: 'qcow2' }),
      'ImageWriteError',
      /virtual size .* larger than/,
    );
  });

  it('an image the RAM-backed buffer cannot hold', async (ctx) => {
    await withTmpfs('2m', ctx, async (dir) => {
      const r = await deploy(
        small.path,
        { disk_format: 'raw', stream_raw_images: false },
        { 'ipa-image-buffer-dir': dir },
      );
      await expectRefused(r, 'ImageDownloadOutofSpaceError', /does not fit in the buffer/);
      // Packed, the 6 MiB image fits in 2 MiB: it is downloaded, and its decoder stopped at the buffer's size.
      const packed = await compress(small.path, 'gzip');
      const p = await deploy(packed, { disk_format: 'raw', stream_raw_images: false }, { 'ipa-image-buffer-dir': dir });
      await expectRefused(
        p,
        'ImageDownloadOutofSpaceError',
        /does not fit in the buffer directory .*: the decompressed image is larger than the \d+ bytes/,
      );
    });
  });

  it('an image larger than free memory, though the tmpfs buffer would take it, before its body is read', async (ctx) => {
    const available = Number(/^MemAvailable:\s+(\d+) kB/m.exec(await readFile('/proc/meminfo', 'utf8'))![1]) * 1024;
    // tmpfs allocates nothing up front, so its size may exceed the machine's memory.
    await withTmpfs(`${Math.ceil((available * 2) / MiB)}m`, ctx, async (dir) => {
      const declared = available + 1024 * MiB;
      // Sends body bytes until the agent hangs up, which it must do as soon as it has the length.
      let hungUp!: () => void;
      const closed = new Promise<void>((resolve) => (hungUp = resolve));
      const liar = createServer((_req, res) => {
        res.writeHead(200, { 'content-type': 'application/octet-stream', 'content-length': declared });
        const more = setInterval(() => res.write(Buffer.alloc(64 * 1024)), 20);
        res.on('close', () => {
          clearInterval(more);
          hungUp();
        });
      });
      await new Promise<void>((resolve) => liar.listen(0, '127.0.0.1', resolve));
      const agent = await startImageAgent(loop.path, { 'ipa-image-buffer-dir': dir, 'ina-qcow2-stream-spool': '0' });
      try {
        const r = await runToEnd(agent.url, 'standby.prepare_image', {
          image_info: {
            id: 'huge',
            urls: [`http://127.0.0.1:${(liar.address() as AddressInfo).port}/huge.qcow2`],
            disk_format: 'qcow2',
            os_hash_algo: 'sha256',
            os_hash_value: 'a'.repeat(64),
          },
        });
        await expectRefused(
          r,
          'ImageDownloadOutofSpaceError',
          new RegExp(
            `the image \\(${declared} bytes\\) does not fit in the buffer: .* \\(RAM-backed: the lesser of its free space and free memory\\)`,
          ),
        );
        const waited = await Promise.race([
          closed.then(() => 'closed'),
          new Promise((resolve) => setTimeout(resolve, 5000, 'still open')),
        ]);
        expect(waited).toBe('closed');
      } finally {
        await agent.close();
        liar.closeAllConnections();
        await new Promise((resolve) => liar.close(resolve));
      }
    });
  });

  it('a config drive that does not decode, before the image is fetched', async () => {
    const name = 'cd-check.raw';
    const url = await server.serveFile(name, small.path);
    const agent = await startImageAgent(loop.path);
    try {
      const r = await runToEnd(agent.url, 'standby.prepare_image', {
        image_info: {
          id: name,
          urls: [url],
          disk_format: 'raw',
          stream_raw_images: true,
          os_hash_algo: 'sha256',
          os_hash_value: await sha256Of(small.path),
        },
        configdrive: 'this is not base64 of a config drive!',
      });
      await expectRefused(r, 'ConfigDriveError', /not base64/);
      expect(server.requests.some((q) => q.path === name)).toBe(false);
    } finally {
      await agent.close();
    }
  });

  it('an md5 checksum when md5 is disabled: HTTP 400 when given, FAILED when a checksum file holds it', async () => {
    const md5 = createHash('md5')
      .update(await readFile(small.path))
      .digest('hex');
    const md5Off = { 'ipa-md5-enabled': 'false' };
    const agent = await startImageAgent(loop.path, md5Off);
    try {
      const image_info = { id: 'x', urls: [server.url('x')] };
      const legacy = await runCommand(agent.url, 'standby.prepare_image', {
        image_info: { ...image_info, checksum: md5 },
      });
      expect([legacy.status, legacy.json.faultstring]).toEqual([
        400,
        expect.stringMatching(/Image checksum is not available/),
      ]);
      const declared = await runCommand(agent.url, 'standby.prepare_image', {
        image_info: { ...image_info, os_hash_algo: 'md5', os_hash_value: md5 },
      });
      expect([declared.status, declared.json.faultstring]).toEqual([
        400,
        expect.stringMatching(/MD5 checksums are disabled/),
      ]);
    } finally {
      await agent.close();
    }
    const sums = server.serve(`md5sums-${Math.random()}`, `${md5}\n`);
    const r = await deploy(
      small.path,
      {
        disk_format: 'raw',
        stream_raw_images: true,
        os_hash_algo: undefined,
        os_hash_value: undefined,
        checksum: sums,
      },
      md5Off,
    );
    await expectRefused(r, 'ImageChecksumError', /MD5 checksums are disabled/);
  });
});

describe('corrupt compressed data', () => {
  it.each(['gzip', 'zstd', 'xz'] as const)('%s: fails as an invalid image', async (kind) => {
    const packed = await readFile(await compress(small.path, kind));
    // Keep the magic, damage the rest.
    for (let i = 64; i < packed.length; i += 97) packed[i] = packed[i]! ^ 0x5a;
    const file = join(work.dir, `corrupt.${kind}`);
    await writeFile(file, packed);
    const r = await deploy(file, { disk_format: 'raw', stream_raw_images: true });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('InvalidImage');
    expect(r.command_error!.details).toMatch(new RegExp(`${kind} data could not be decompressed`));
  });
});

describe('checksum mismatch', () => {
  it('fails naming both digests and leaves nothing that looks like a disk label', async () => {
    const wrong = 'ab'.repeat(32);
    const r = await deploy(small.path, { disk_format: 'raw', stream_raw_images: true, os_hash_value: wrong });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageChecksumError');
    expect(r.command_error!.details).toContain(`image checksum: ${wrong}`);
    expect(r.command_error!.details).toContain(`verification checksum: ${await sha256Of(small.path)}`);
    await expectNoDiskLabel();
  });

  // A plain buffered image is hashed from its buffer file while it is written, so the mismatch shows after;
  // a streamed qcow2 is hashed as it passes, and the mismatch shows once the last byte is placed.
  it.each([
    ['qcow2, streamed', { disk_format: 'qcow2' }, true, {}],
    ['qcow2, converted', { disk_format: 'qcow2' }, true, { 'ina-qcow2-stream-spool': '0' }],
    ['raw, not streamed', { disk_format: 'raw', stream_raw_images: false }, false, {}],
  ] as const)(
    '%s: fails once written and leaves nothing that looks like a disk label',
    async (_, info, convert, flags) => {
      const wrong = 'cd'.repeat(32);
      const file = convert ? await toQcow2(small.path, join(work.dir, 'mismatch.qcow2')) : small.path;
      const r = await deploy(file, { ...info, os_hash_value: wrong }, flags);
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error!.type).toBe('ImageChecksumError');
      expect(r.command_error!.details).toContain(`verification checksum: ${await sha256Of(file)}`);
      await expectNoDiskLabel();
    },
  );

  it('a compressed buffered image: fails before the device is written', async () => {
    const packed = await compress(await toQcow2(small.path, join(work.dir, 'mismatch-packed.qcow2')), 'gzip');
    const r = await deploy(
      packed,
      { disk_format: 'qcow2', os_hash_value: 'ef'.repeat(32) },
      { 'ina-qcow2-stream-spool': '0' },
    );
    await expectRefused(r, 'ImageChecksumError', new RegExp(`verification checksum: ${await sha256Of(packed)}`));
  });

  it('a compressed streamed qcow2: fails once written, over the packed bytes, and leaves nothing that looks like a disk label', async () => {
    const packed = await compress(await toQcow2(small.path, join(work.dir, 'mismatch-streamed.qcow2')), 'zstd');
    const r = await deploy(packed, { disk_format: 'qcow2', os_hash_value: 'ef'.repeat(32) });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageChecksumError');
    expect(r.command_error!.details).toContain(`verification checksum: ${await sha256Of(packed)}`);
    await expectNoDiskLabel();
  });

  it('is reported rather than the refusal that damaged bytes cause, and the device is not written', async () => {
    const qcow2 = await toQcow2(small.path, join(work.dir, 'mismatch-disguised.qcow2'));
    const r = await deploy(qcow2, { disk_format: 'raw', stream_raw_images: false, os_hash_value: '01'.repeat(32) });
    await expectRefused(r, 'ImageChecksumError', /image checksum: (01){32}/);
  });
});

describe('bad image_info', () => {
  it('is an HTTP 400 for standby.prepare_image, with nothing recorded', async () => {
    const agent = await startImageAgent(loop.path);
    try {
      const r = await runCommand(agent.url, 'standby.prepare_image', {
        image_info: { id: 'x', urls: ['http://127.0.0.1/x'] },
      });
      expect(r.status).toBe(400);
      expect(r.json.faultstring).toMatch(/^Invalid command parameters: Image checksum is not available/);
      const missing = await runCommand(agent.url, 'standby.prepare_image', {
        image_info: { id: 'x', checksum: 'a'.repeat(64) },
      });
      expect(missing.json.faultstring).toBe("Invalid command parameters: Image is missing 'urls' field.");
      expect((await call(`${agent.url}/v1/commands/`)).json.commands).toEqual([]);
    } finally {
      await agent.close();
    }
  });

  it('refuses partition images, which this agent does not write, with HTTP 400', async () => {
    const agent = await startImageAgent(loop.path);
    try {
      const r = await runCommand(agent.url, 'standby.prepare_image', {
        image_info: { id: 'p', urls: ['http://127.0.0.1/p'], checksum: 'a'.repeat(64), image_type: 'partition' },
      });
      expect(r.status).toBe(400);
      expect(r.json.faultstring).toMatch(/^Invalid command parameters: Partition images are not supported/);
      expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
    } finally {
      await agent.close();
    }
  });

  it('is a FAILED InvalidCommandParamsError inside deploy.execute_deploy_step', async () => {
    const agent = await startImageAgent(loop.path);
    try {
      const step = { interface: 'deploy', step: 'write_image', args: { image_info: { id: 'x', urls: [] } } };
      const r = await runToEnd(agent.url, 'deploy.execute_deploy_step', { step, node: {}, ports: [] });
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error!.type).toBe('InvalidCommandParamsError');
      expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
    } finally {
      await agent.close();
    }
  });
});

/**
 * Overwrites the start of the last compressed cluster of a compressed qcow2 with bytes that do not
 * inflate. The header and tables stay valid, so the image passes inspection and qemu-img's scan of the
 * allocation, but the conversion fails with an I/O error when it reads that cluster, after it has written
 * the clusters before it.
 */
async function corruptLastCluster(qcow2: string): Promise<void> {
  const fh = await open(qcow2, 'r+');
  try {
    const header = Buffer.alloc(48);
    await fh.read(header, 0, 48, 0);
    const clusterBits = header.readUInt32BE(20);
    const clusterBytes = 2 ** clusterBits;
    const l1Size = header.readUInt32BE(36);
    const l1 = Buffer.alloc(l1Size * 8);
    await fh.read(l1, 0, l1.length, Number(header.readBigUInt64BE(40)));
    let last = -1n;
    for (let i = 0; i < l1Size; i++) {
      const l2 = Number(l1.readBigUInt64BE(i * 8) & 0x00fffffffffffe00n);
      if (l2 === 0) continue;
      const table = Buffer.alloc(clusterBytes);
      await fh.read(table, 0, clusterBytes, l2);
      for (let j = 0; j < clusterBytes / 8; j++) {
        const e = table.readBigUInt64BE(j * 8);
        if (e & (1n << 62n)) last = e;
      }
    }
    if (last < 0n) throw new Error('the qcow2 has no compressed cluster');
    const offset = Number(last & ((1n << BigInt(62 - (clusterBits - 8))) - 1n));
    await fh.write(Buffer.alloc(64, 0xff), 0, 64, offset);
  } finally {
    await fh.close();
  }
}

/** Nothing on the device that a firmware or an installer would take for a disk label. */
async function expectNoDiskLabel(): Promise<void> {
  expect((await readDevice(loop.path, 0, MiB)).equals(Buffer.alloc(MiB))).toBe(true);
  const parted = await execa('parted', ['-s', '-m', loop.path, 'print'], { reject: false });
  expect(parted.stdout + parted.stderr).toMatch(/unrecognised disk label/i);
}

describe('a packed image that goes wrong after writing began', () => {
  it.each(['gzip', 'zstd', 'xz'] as const)(
    '%s: data broken past the head fails as an invalid image, and no disk label is left',
    async (kind) => {
      const img = await makeDiskImage(work.dir, {
        table: 'gpt',
        sizeMiB: 14,
        name: `late-${kind}.raw`,
        randomKiB: 10 * 1024,
      });
      const packed = await readFile(await compress(img.path, kind));
      for (let i = packed.length - 64 * 1024; i < packed.length - 100; i += 97) packed[i] = packed[i]! ^ 0x5a;
      const file = join(work.dir, `late-broken.${kind}`);
      await writeFile(file, packed);
      const r = await deploy(file, { disk_format: 'raw', stream_raw_images: true });
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error!.type).toBe('InvalidImage');
      expect(r.command_error!.details).toMatch(new RegExp(`${kind} data could not be decompressed`));
      await expectNoDiskLabel();
    },
  );

  it.each(['gzip', 'zstd'] as const)(
    '%s: an image that decodes to more than the disk fails as too large, and no disk label is left',
    async (kind) => {
      const big = await makeDiskImage(work.dir, {
        table: 'gpt',
        sizeMiB: 24,
        name: `big-packed-${kind}.raw`,
        randomKiB: 64,
      });
      const r = await deploy(await compress(big.path, kind), { disk_format: 'raw', stream_raw_images: true });
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error!.type).toBe('ImageWriteError');
      expect(r.command_error!.details).toMatch(/decompressed image is larger than/);
      await expectNoDiskLabel();
    },
  );
});

describe('a conversion that fails halfway', () => {
  it('streamed: fails with InvalidImage once the broken cluster arrives, and leaves nothing that looks like a disk label', async () => {
    const img = await makeDiskImage(work.dir, {
      table: 'gpt',
      sizeMiB: 14,
      name: 'halfway-streamed.raw',
      randomKiB: 10 * 1024,
    });
    const qcow2 = `${img.path}.qcow2`;
    await execa('qemu-img', ['convert', '-q', '-c', '-f', 'raw', '-O', 'qcow2', img.path, qcow2]);
    await corruptLastCluster(qcow2);
    const r = await deploy(qcow2, { disk_format: 'qcow2' });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('InvalidImage');
    expect(r.command_error!.details).toMatch(/compressed cluster at guest offset \d+ cannot be decoded/);
    await expectNoDiskLabel();
  });

  it('buffered: fails with ImageWriteError and leaves nothing that looks like a disk label', async () => {
    const img = await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 14, name: 'halfway.raw', randomKiB: 10 * 1024 });
    const qcow2 = `${img.path}.qcow2`;
    await execa('qemu-img', ['convert', '-q', '-c', '-f', 'raw', '-O', 'qcow2', img.path, qcow2]);
    await corruptLastCluster(qcow2);
    const r = await deploy(qcow2, { disk_format: 'qcow2' }, { 'ina-qcow2-stream-spool': '0' });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageWriteError');
    expect(r.command_error!.details).toMatch(/Writing image to device .* failed with exit code 1/);
    await expectNoDiskLabel();

    // The same bytes, damaged in transit as far as the checksum tells: that is what is reported, after the
    // failed write was cleared (the paint is gone).
    await paint(loop.path, loop.sizeBytes);
    const mismatch = await deploy(
      qcow2,
      { disk_format: 'qcow2', os_hash_value: '23'.repeat(32) },
      { 'ina-qcow2-stream-spool': '0' },
    );
    expect(mismatch.command_error!.type).toBe('ImageChecksumError');
    await expectNoDiskLabel();
  });
});
