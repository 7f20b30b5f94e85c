// prepareConfigDrive: every accepted form decodes to the same checked image; every bad one is a
// ConfigDriveError before any disk is involved (no loop device exists in this file at all).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ConfigDriveError } from '../../agent/errors.ts';
import { MAX_CONFIG_DRIVE_BYTES, prepareConfigDrive } from '../../agent/configdrive/prepare.ts';
import { buildIso, diskServices, toWire } from '../helpers/configdrive.ts';

const services = diskServices([], {
  'ipa-image-download-connection-retries': '2',
  'ipa-image-download-connection-retry-interval': '0',
});
let iso: Buffer;
let server: Server;
let base: string;
let hits: Record<string, number>;

beforeAll(async () => {
  iso = await buildIso();
  hits = {};
  server = createServer((req, res) => {
    const path = req.url ?? '/';
    hits[path] = (hits[path] ?? 0) + 1;
    if (path === '/drive.gz') return res.end(gzipSync(iso));
    if (path === '/drive.iso') return res.end(iso);
    if (path === '/drive.b64') return res.end(toWire(iso));
    if (path === '/flaky' && hits[path]! < 3) {
      res.statusCode = 503;
      return res.end('try later');
    }
    if (path === '/flaky') return res.end(toWire(iso));
    res.statusCode = 404;
    res.end('no such drive');
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  await new Promise((resolve) => server.close(resolve));
});

async function rejects(value: string, message: RegExp): Promise<void> {
  const err = await prepareConfigDrive(services, value).catch((e: unknown) => e);
  expect(err).toBeInstanceOf(ConfigDriveError);
  expect((err as Error).message).toMatch(message);
}

describe('prepareConfigDrive', () => {
  it('decodes base64 of gzip, the form ironic sends', async () => {
    const drive = await prepareConfigDrive(services, toWire(iso));
    expect(drive.format).toBe('iso9660');
    expect(drive.label).toBe('config-2');
    expect(drive.bytes.equals(iso)).toBe(true);
  });

  it('accepts base64 of an ungzipped ISO, and line-wrapped base64', async () => {
    const plain = await prepareConfigDrive(services, iso.toString('base64'));
    expect(plain.bytes.equals(iso)).toBe(true);
    const wrapped = toWire(iso).replace(/(.{76})/g, '$1\n');
    expect((await prepareConfigDrive(services, wrapped)).bytes.equals(iso)).toBe(true);
  });

  it('accepts a VFAT image labelled CONFIG-2', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-vfat-'));
    try {
      const file = join(dir, 'fat.img');
      await execa('mkfs.vfat', ['-C', '-n', 'CONFIG-2', file, '2048']);
      const drive = await prepareConfigDrive(services, toWire(await readFile(file)));
      expect(drive.format).toBe('vfat');
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('rejects text that is not base64', async () => {
    await rejects('this is *not* base64!', /not base64 encoded/);
  });

  it('rejects a truncated gzip stream', async () => {
    const gz = gzipSync(iso);
    await rejects(gz.subarray(0, gz.length >> 1).toString('base64'), /decompressing/);
  });

  it('rejects a corrupt gzip stream', async () => {
    const gz = Buffer.from(gzipSync(iso));
    gz.fill(0x55, 20, 200);
    await rejects(gz.toString('base64'), /decompressing/);
  });

  it('rejects content that is neither ISO9660 nor VFAT', async () => {
    await rejects(toWire(Buffer.alloc(64 * 1024, 7)), /neither an ISO9660 nor a VFAT/);
  });

  it('rejects an ISO with another label', async () => {
    await rejects(toWire(await buildIso(undefined, 'cidata')), /labelled "cidata"/);
  });

  it('rejects a drive larger than 64 MiB after decompression', async () => {
    await rejects(toWire(Buffer.alloc(MAX_CONFIG_DRIVE_BYTES + 1)), /exceeds maximum limit of 64MiB/);
  });

  it('rejects an empty value', async () => {
    await rejects('', /empty/);
  });

  it('downloads a URL serving gzip, a raw ISO, or base64 text', async () => {
    for (const path of ['/drive.gz', '/drive.iso', '/drive.b64']) {
      const drive = await prepareConfigDrive(services, `${base}${path}`);
      expect(drive.bytes.equals(iso), path).toBe(true);
      expect(drive.source).toBe(`${base}${path}`);
    }
  });

  it('retries a URL answering 5xx', async () => {
    const drive = await prepareConfigDrive(services, `${base}/flaky`);
    expect(drive.bytes.equals(iso)).toBe(true);
    expect(hits['/flaky']).toBe(3);
  });

  it('does not retry a 4xx and says what the server answered', async () => {
    await rejects(`${base}/missing`, /status code 404.*no such drive/);
    expect(hits['/missing']).toBe(1);
  });

  it('gives up on an unreachable server, naming the URL', async () => {
    const closed = createServer();
    await new Promise<void>((resolve) => closed.listen(0, '127.0.0.1', resolve));
    const port = (closed.address() as AddressInfo).port;
    await new Promise((resolve) => closed.close(resolve));
    await rejects(`http://127.0.0.1:${port}/drive`, /Can't download the configdrive content/);
  });

  it('refuses schemes other than http and https', async () => {
    await rejects('swift://container/object', /not http or https/);
  });
});
