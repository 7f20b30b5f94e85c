// Whole deploys through the agent's API onto a real loop device: raw (streamed and buffered), gzip, zstd,
// xz and qcow2, each checked byte for byte and by reading the marker file from the written filesystem.
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import pino from 'pino';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { LogRing } from '../../agent/log.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import {
  deployFile,
  paint,
  readDevice,
  readMarker,
  runCommand,
  runToEnd,
  sha256,
  startImageAgent,
} from '../helpers/image-agent.ts';
import { call } from '../helpers/api-harness.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { compress, makeDiskImage, toQcow2, workDir, type DiskImage } from '../helpers/make-image.ts';
import { until } from '../helpers/until.ts';

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

// Every deploy starts from a painted disk, so that a check of the written bytes cannot pass on an earlier test's image.
beforeEach(async () => {
  await paint(loop.path, loop.sizeBytes);
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

function deploy(file: string, imageInfo: Record<string, unknown>, ring?: LogRing, flags?: Record<string, string>) {
  return deployFile(server, loop.path, file, imageInfo, { ring, flags });
}

/** The deploy phases, in the order the agent logged how long each took. */
function phasesIn(log: LogRing): (string | undefined)[] {
  return log
    .tail()
    .map((l) => JSON.parse(l) as { phase?: string; phase_s?: number })
    .filter((l) => l.phase_s !== undefined)
    .map((l) => l.phase);
}

function succeeded(r: { command_status: string; command_error: unknown }): void {
  expect(r.command_error).toBeNull();
  expect(r.command_status).toBe('SUCCEEDED');
}

describe('standby.prepare_image writes real images', () => {
  it('streams a raw GPT image and relocates the backup GPT', async () => {
    const r = await deploy(gpt.path, { disk_format: 'raw', stream_raw_images: true });
    expect(r.command_error).toBeNull();
    expect(r.command_status).toBe('SUCCEEDED');
    expect(r.command_result.result).toMatch(
      new RegExp(`^prepare_image: image \\(.+\\) written to device ${loop.path} root_uuid=0x[0-9a-f]{8}$`),
    );
    await expectWritten(gpt);
  });

  it('buffers a raw MBR image when streaming is off, and reports the MBR disk identifier', async () => {
    const log = new LogRing();
    const r = await deploy(mbr.path, { disk_format: 'raw', stream_raw_images: false }, log);
    succeeded(r);
    await expectWritten(mbr);
    const id = (await readFile(mbr.path)).readUInt32LE(440).toString(16).padStart(8, '0');
    expect(r.command_result.result).toMatch(new RegExp(`root_uuid=0x${id}$`));
    // A plain download: its checksum is waited for after the copy, before the table is re-read.
    expect(phasesIn(log)).toEqual(['device', 'download', 'inspect', 'write', 'verify', 'table', 'check']);
  });

  it.each(['none', 'gzip', 'zstd', 'xz'] as const)(
    'streams a qcow2 image (packed: %s) through the qcow2 reader, no buffer, no qemu-img',
    async (kind) => {
      const log = new LogRing();
      const qcow2 = await toQcow2(gpt.path, join(work.dir, `streamed-${kind}.qcow2`));
      succeeded(await deploy(kind === 'none' ? qcow2 : await compress(qcow2, kind), { disk_format: 'qcow2' }, log));
      await expectWritten(gpt);
      expect(phasesIn(log)).toEqual(['device', 'stream', 'table', 'check']);
      expect(log.tail().some((l) => l.includes('qcow2 image placed by the streaming reader'))).toBe(true);
    },
  );

  it('converts a gzip-packed qcow2 image from the buffer (streaming off), its checksum (over the packed bytes) checked before the device is written', async () => {
    const log = new LogRing();
    const packed = await compress(await toQcow2(gpt.path, join(work.dir, 'packed.qcow2')), 'gzip');
    succeeded(await deploy(packed, { disk_format: 'qcow2' }, log, { 'ina-qcow2-stream-spool': '0' }));
    await expectWritten(gpt);
    expect(phasesIn(log)).toEqual(['device', 'download', 'inspect', 'convert', 'table', 'check']);
  });

  for (const kind of ['gzip', 'zstd', 'xz'] as const) {
    it(`decompresses a ${kind} raw image on the fly (the checksum covers the compressed bytes)`, async () => {
      succeeded(await deploy(await compress(gpt.path, kind), { disk_format: 'raw', stream_raw_images: true }));
      await expectWritten(gpt);
    });
  }

  // pigz stops reading at the end of the gzip data; the rest must still reach the checksum, whichever path.
  it.each([true, false])(
    'writes a gzip image padded with 2 MiB of zeros (streamed: %s), its checksum over every byte',
    async (stream) => {
      const padded = join(work.dir, `padded-${stream}.gz`);
      await writeFile(padded, Buffer.concat([await readFile(await compress(gpt.path, 'gzip')), Buffer.alloc(2 * MiB)]));
      succeeded(await deploy(padded, { disk_format: 'raw', stream_raw_images: stream }));
      await expectWritten(gpt);
    },
  );

  it('converts a qcow2 image with qemu-img from the buffer (streaming off), checks the checksum after, and deletes the buffer', async () => {
    const bufferDir = join(work.dir, 'buffer');
    await mkdir(bufferDir);
    const name = 'q.qcow2';
    const file = await toQcow2(mbr.path, join(work.dir, name));
    const url = await server.serveFile(name, file);
    const log = new LogRing();
    const agent = await startImageAgent(
      loop.path,
      { 'ipa-image-buffer-dir': bufferDir, 'ina-qcow2-stream-spool': '0' },
      pino({ base: null }, log),
    );
    try {
      const r = await runToEnd(agent.url, 'standby.prepare_image', {
        image_info: {
          id: name,
          urls: [url],
          disk_format: 'qcow2',
          os_hash_algo: 'sha256',
          os_hash_value: sha256(await readFile(file)),
        },
      });
      succeeded(r);
    } finally {
      await agent.close();
    }
    await expectWritten(mbr);
    expect(await readdir(bufferDir)).toEqual([]);
    // A plain download: its checksum is waited for after the conversion, before the table is re-read.
    expect(phasesIn(log)).toEqual(['device', 'download', 'inspect', 'convert', 'verify', 'table', 'check']);
  });
});

describe('checksum forms', () => {
  it('accepts every way image_info can carry the digest', async () => {
    const data = await readFile(mbr.path);
    const digest = (algo: string) => createHash(algo).update(data).digest('hex');
    const fileName = 'mbr-image.raw';
    const url = await server.serveFile(fileName, mbr.path);
    const gnu = server.serve('SHA256SUMS', `${'0'.repeat(64)}  other.raw\n${digest('sha256')} *${fileName}\n`);
    const bsd = server.serve('SHA512SUMS', `# comment\nSHA512 (${fileName}) = ${digest('sha512').toUpperCase()}\n`);
    const bare = server.serve('bare.md5', `${digest('md5')}\n`);
    const forms: Record<string, unknown>[] = [
      { os_hash_algo: 'sha512', os_hash_value: digest('sha512').toUpperCase() },
      { checksum: digest('sha256') },
      { checksum: digest('md5') },
      { checksum: gnu },
      { os_hash_algo: 'sha512', os_hash_value: bsd },
      { checksum: bare },
    ];
    const agent = await startImageAgent(loop.path);
    try {
      for (const form of forms) {
        const r = await runToEnd(agent.url, 'standby.prepare_image', {
          image_info: { id: fileName, urls: [url], disk_format: 'raw', stream_raw_images: true, ...form },
        });
        expect({ form, error: r.command_error }).toEqual({ form, error: null });
      }
    } finally {
      await agent.close();
    }
    await expectWritten(mbr);
  });
});

describe('deploy steps and partition UUIDs', () => {
  it('lists write_image, runs it as execute_deploy_step, then reports the UUIDs', async () => {
    const agent = await startImageAgent(loop.path);
    try {
      const steps = await runToEnd(agent.url, 'deploy.get_deploy_steps', { node: {}, ports: [] });
      const list = steps.command_result.deploy_steps.GenericHardwareManager;
      expect(list).toContainEqual(expect.objectContaining({ step: 'write_image', interface: 'deploy', priority: 0 }));
      const version = steps.command_result.hardware_manager_version;

      expect((await runToEnd(agent.url, 'standby.get_partition_uuids', {})).command_result).toEqual({});

      const url = await server.serveFile('step.raw', mbr.path);
      const step = {
        interface: 'deploy',
        step: 'write_image',
        args: {
          image_info: {
            id: 'step.raw',
            urls: [url],
            disk_format: 'raw',
            stream_raw_images: true,
            checksum: sha256(await readFile(mbr.path)),
          },
          configdrive: null,
        },
      };
      const node = { uuid: 'n1', properties: {}, instance_info: { root_device: { name: loop.path } } };
      const r = await runToEnd(agent.url, 'deploy.execute_deploy_step', {
        step,
        node,
        ports: [],
        deploy_version: version,
      });
      succeeded(r);
      expect(r.command_result.deploy_step).toEqual(step);
      expect(r.command_result.deploy_result.result).toMatch(
        /^prepare_image: image \(step\.raw\) written to device .* root_uuid=0x[0-9a-f]{8}$/,
      );

      const uuids = await runToEnd(agent.url, 'standby.get_partition_uuids', {});
      expect(uuids.command_result['root uuid']).toBe(r.command_result.deploy_result.result.split('root_uuid=')[1]);

      const mismatch = await runToEnd(agent.url, 'deploy.execute_deploy_step', {
        step,
        node,
        ports: [],
        deploy_version: { generic_hardware_manager: '0.1' },
      });
      expect(mismatch.command_status).toBe('CLEAN_VERSION_MISMATCH');
      expect((await runToEnd(agent.url, 'standby.get_partition_uuids', {})).command_result).toEqual(
        uuids.command_result,
      );

      // A failed write leaves no UUIDs of the image it replaced.
      const broken = {
        ...step,
        args: { ...step.args, image_info: { ...step.args.image_info, checksum: 'ab'.repeat(32) } },
      };
      expect(
        (
          await runToEnd(agent.url, 'deploy.execute_deploy_step', {
            step: broken,
            node,
            ports: [],
            deploy_version: version,
          })
        ).command_status,
      ).toBe('FAILED');
      expect((await runToEnd(agent.url, 'standby.get_partition_uuids', {})).command_result).toEqual({});
      await runToEnd(agent.url, 'deploy.execute_deploy_step', { step, node, ports: [], deploy_version: version });
    } finally {
      await agent.close();
    }
    await expectWritten(mbr);
  });
});

describe('progress', () => {
  it('shows phase, bytes, rate and eta while RUNNING', async () => {
    const data = await readFile(mbr.path);
    server.serve('slow.raw', data);
    // The server stalls after 2 MiB; the agent waits out the stall timeout, then resumes.
    server.fault('slow.raw', { kind: 'stall-after', bytes: 2 * MiB });
    const agent = await startImageAgent(loop.path, { 'ipa-image-download-connection-timeout': '2' });
    try {
      const started = await runCommand(
        agent.url,
        'standby.prepare_image',
        {
          image_info: {
            id: 'slow.raw',
            urls: [server.url('slow.raw')],
            disk_format: 'raw',
            stream_raw_images: true,
            checksum: sha256(data),
          },
        },
        false,
      );
      expect(started.json.command_status).toBe('RUNNING');
      let seen: any = null;
      const ended = await until(
        'the deploy to end',
        async () => {
          const last = (await call(`${agent.url}/v1/commands/`)).json.commands.at(-1);
          if (last.command_status !== 'RUNNING') return last;
          if (last.command_result?.phase === 'stream') seen = last.command_result;
          return undefined;
        },
        120_000,
        100,
      );
      succeeded(ended);
      expect(seen).toEqual({
        phase: 'stream',
        bytes_done: expect.any(Number),
        bytes_total: data.length,
        rate_bps: expect.any(Number),
        eta_s: seen.bytes_done > 0 ? expect.any(Number) : null,
      });
    } finally {
      await agent.close();
    }
  });
});
