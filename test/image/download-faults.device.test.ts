// The download under fire: a real loopback server that drops connections, stalls, answers 404 or 500,
// with and without byte ranges, and a real forward proxy. Each deploy goes onto a real loop device.
import { createHash } from 'node:crypto';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import { isPainted, paint, readDevice, runToEnd, startImageAgent } from '../helpers/image-agent.ts';
import { selfSignedCert, startImageServer, startProxy, type ImageServer } from '../helpers/image-server.ts';
import { compress, makeDiskImage, workDir } from '../helpers/make-image.ts';
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { createServer } from 'node:http';
import { brotliCompressSync, deflateSync, gzipSync } from 'node:zlib';
import pino from 'pino';
import { LogRing, type Logger } from '../../agent/log.ts';
import type { Clock } from '../../agent/clock.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';
import type { AddressInfo } from 'node:net';

let loop: LoopDevice;
let image: Buffer;
let digest: string;
let work: Awaited<ReturnType<typeof workDir>>;
const servers: { close(): Promise<void> }[] = [];

beforeAll(async () => {
  work = await workDir();
  image = await readFile((await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 6 })).path);
  digest = createHash('sha256').update(image).digest('hex');
  loop = await attachLoop(16 * MiB);
});

// Every deploy starts from a painted disk, so that a check of the written bytes cannot pass on an earlier test's image.
beforeEach(async () => {
  await paint(loop.path, loop.sizeBytes);
});

afterEach(async () => {
  while (servers.length) await servers.pop()!.close();
});

afterAll(async () => {
  await detachLoop(loop);
  await work.cleanup();
});

async function server(opts: Parameters<typeof startImageServer>[0] = {}): Promise<ImageServer> {
  const s = await startImageServer(opts);
  servers.push(s);
  return s;
}

async function deploy(
  urls: string[],
  extra: Record<string, unknown> = {},
  flags: Record<string, string> = {},
  log?: Logger,
  clock?: Clock,
) {
  const agent = await startImageAgent(loop.path, flags, log, clock);
  try {
    return await runToEnd(agent.url, 'standby.prepare_image', {
      image_info: {
        id: 'faults',
        urls,
        os_hash_algo: 'sha256',
        os_hash_value: digest,
        disk_format: 'raw',
        stream_raw_images: true,
        ...extra,
      },
    });
  } finally {
    await agent.close();
  }
}

async function expectImageOnDisk(expected = image): Promise<void> {
  expect((await readDevice(loop.path, 0, expected.length)).equals(expected)).toBe(true);
}

describe('image download faults', () => {
  it('resumes with Range + If-Range when the server drops the connection and supports ranges', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault('img', { kind: 'close-after', bytes: 1 * MiB }, { kind: 'close-after', bytes: 2 * MiB });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    const resumes = s.requests.filter((q) => q.range);
    expect(resumes.length).toBe(2);
    expect(resumes[0]!.ifRange).toMatch(/^"img-/);
    expect(resumes.every((q) => q.status === 206)).toBe(true);
    expect(s.requests.length).toBe(3);
  });

  it('starts over from byte zero when the server has no range support', async () => {
    const s = await server({ ranges: false });
    const url = s.serve('img', image);
    s.fault('img', { kind: 'close-after', bytes: 3 * MiB });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    expect(s.requests.map((q) => [q.range ?? null, q.status])).toEqual([
      [null, 200],
      [null, 200],
    ]);
  });

  it('starts over when the server offers ranges but no validator to resume against', async () => {
    const s = await server({ etag: false });
    const url = s.serve('img', image);
    s.fault('img', { kind: 'close-after', bytes: 1 * MiB });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    expect(s.requests.filter((q) => q.range).length).toBe(0);
    await expectImageOnDisk();
  });

  it('resumes against Last-Modified when the server sends no ETag', async () => {
    const s = await server({ etag: false, lastModified: true });
    const url = s.serve('img', image);
    s.fault('img', { kind: 'close-after', bytes: 1 * MiB });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    expect(s.requests.map((q) => [q.range ?? null, q.status])).toEqual([
      [null, 200],
      [`bytes=${1 * MiB}-`, 206],
    ]);
    expect(s.requests[1]!.ifRange).toMatch(/ GMT$/);
  });

  // The image changes on the server between the break and the resume; each way a server can answer that.
  it.each([
    {
      how: 'ignores If-Range, new ETag',
      options: { ignoreIfRange: true },
      extra: 0,
      sameValidators: false,
      resumed: 206,
    },
    {
      how: 'ignores If-Range, new Last-Modified',
      options: { ignoreIfRange: true, etag: false, lastModified: true },
      extra: 0,
      sameValidators: false,
      resumed: 206,
    },
    {
      how: 'ignores If-Range, same validators, another length',
      options: { ignoreIfRange: true },
      extra: 4096,
      sameValidators: true,
      resumed: 206,
    },
    { how: 'honours If-Range with the new image in full', options: {}, extra: 0, sameValidators: false, resumed: 200 },
  ])(
    'starts over when the image changed before the resume and the server $how',
    async ({ options, extra, sameValidators, resumed }) => {
      const s = await server(options);
      // Other bytes: a splice of the two versions would fail the checksum.
      const url = s.serve('img', Buffer.alloc(image.length + extra, 0x5a));
      // biome-ignore lint/suspicious/noThenProperty: the fault's follow-up action, not a thenable
      s.fault('img', { kind: 'close-after', bytes: 1 * MiB, then: () => s.serve('img', image, { sameValidators }) });
      const r = await deploy([url]);
      expect(r.command_error).toBeNull();
      await expectImageOnDisk();
      expect(s.requests.map((q) => [q.range ?? null, q.status])).toEqual([
        [null, 200],
        [`bytes=${1 * MiB}-`, resumed],
        [null, 200],
      ]);
    },
  );

  it('resumes through more breaks than the retry count when each resumed answer makes progress', async () => {
    const s = await server();
    const url = s.serve('img', image);
    // 1.25 MiB per answer: five answers for the 6 MiB image, four breaks against the helper's two retries.
    s.fault('img', ...Array.from({ length: 4 }, () => ({ kind: 'close-after' as const, bytes: 1.25 * MiB })));
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    expect(s.requests.map((q) => q.status)).toEqual([200, 206, 206, 206, 206]);
  });

  it('starts over from byte zero when every resume fails, and a plain request still works', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault(
      'img',
      { kind: 'close-after', bytes: 1 * MiB },
      { kind: 'status', code: 503 },
      { kind: 'status', code: 503 },
    );
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    expect(s.requests.map((q) => [q.range ? 'range' : 'full', q.status])).toEqual([
      ['full', 200],
      ['range', 503],
      ['range', 503],
      ['full', 200],
    ]);
  });

  for (const stream of [true, false]) {
    it(`downloads again after bytes damaged on the way fail the checksum (${stream ? 'streamed' : 'buffered'})`, async () => {
      const s = await server();
      const url = s.serve('img', image);
      s.fault('img', { kind: 'corrupt', at: 3 * MiB });
      const r = await deploy([url], { stream_raw_images: stream });
      expect(r.command_error).toBeNull();
      await expectImageOnDisk();
      expect(s.requests.map((q) => q.status)).toEqual([200, 200]);
    });
  }

  it('downloads a second time when the checksum is wrong, and not a third once the same bytes came twice', async () => {
    const s = await server();
    const url = s.serve('img', image);
    const r = await deploy([url], { os_hash_value: 'ab'.repeat(32) }, { 'ipa-image-download-connection-retries': '5' });
    expect(r.command_error).toMatchObject({
      type: 'ImageChecksumError',
      details: expect.stringContaining(`verification checksum: ${digest}`),
    });
    expect(s.requests.length).toBe(2);
  });

  it('fails a truncated body that never completes, and reports no success', async () => {
    const s = await server({ ranges: false });
    const url = s.serve('img', image);
    s.fault('img', ...Array.from({ length: 5 }, () => ({ kind: 'close-after' as const, bytes: 2 * MiB })));
    const r = await deploy([url], {}, { 'ipa-image-download-connection-retries': '1' });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageDownloadError');
    expect(r.command_error!.details).toMatch(/broke at byte/);
  });

  it('does not ask a 404 again, but moves on to the next URL, as IPA does after any download error', async () => {
    const s = await server();
    const good = s.serve('img', image);
    const r = await deploy([s.url('missing'), good]);
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => `${q.path}:${q.status}`)).toEqual(['missing:404', 'img:200']);
    await expectImageOnDisk();
  });

  it('names what every URL answered when all fail, and leaves the disk untouched', async () => {
    const s = await server();
    s.serve('busy', image);
    s.fault('busy', ...Array.from({ length: 3 }, () => ({ kind: 'status' as const, code: 503 })));
    await paint(loop.path, loop.sizeBytes);
    const r = await deploy([s.url('missing'), s.url('busy'), 'http://127.0.0.1:1/refused']);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageDownloadError');
    const lines = r.command_error!.details.split('\n').map((l) => l.trim());
    expect(lines[0]).toMatch(/failed from every URL/);
    expect(lines[1]).toMatch(/\/missing: received status code 404/);
    expect(lines[2]).toMatch(/\/busy: received status code 503/);
    expect(lines[3]).toMatch(/127\.0\.0\.1:1\/refused: .*ECONNREFUSED/);
    // A 404 is asked once; a 503 retries + 1 times (the helper's agent runs with retries=2).
    expect(s.requests.map((q) => `${q.path}:${q.status}`)).toEqual(['missing:404', 'busy:503', 'busy:503', 'busy:503']);
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });

  it('fails with ImageDownloadFatalError when every URL answered with a final 4xx', async () => {
    const s = await server();
    const r = await deploy([s.url('missing'), s.url('gone')]);
    expect(r.command_error!.type).toBe('ImageDownloadFatalError');
    expect(s.requests.map((q) => `${q.path}:${q.status}`)).toEqual(['missing:404', 'gone:404']);
  });

  it('retries a 500 and succeeds on the following 200', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault('img', { kind: 'status', code: 500 });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => q.status)).toEqual([500, 200]);
    await expectImageOnDisk();
  });

  it('retries 408 and 429 like a server error', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault('img', { kind: 'status', code: 408 }, { kind: 'status', code: 429 });
    const r = await deploy([url]);
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => q.status)).toEqual([408, 429, 200]);
    await expectImageOnDisk();
  });

  it('waits as long as a 429 or 503 asks with Retry-After before the next attempt', async () => {
    const s = await server();
    const url = s.serve('img', image);
    // Far enough ahead that a loaded machine's delay before the agent reads it cannot shrink the pause below 10 s.
    const later = new Date(Date.now() + 20_000).toUTCString();
    s.fault(
      'img',
      { kind: 'status', code: 429, headers: { 'retry-after': '1' } },
      { kind: 'status', code: 503, headers: { 'retry-after': later } },
      { kind: 'status', code: 503, headers: { 'retry-after': 'soon' } },
    );
    const clock = new VirtualClock();
    const r = await deploy([url], {}, { 'ipa-image-download-connection-retries': '3' }, undefined, clock);
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => q.status)).toEqual([429, 503, 503, 200]);
    // On virtual time: the first pause is the server's second, the next lasts until its date (whole seconds, less
    // the wall time the request took), and an unreadable Retry-After leaves the retry interval (50 ms).
    expect(clock.sleeps[0]).toBe(1000);
    expect(clock.sleeps[1]).toBeGreaterThan(10_000);
    expect(clock.sleeps[1]).toBeLessThanOrEqual(20_000);
    expect(clock.sleeps.slice(2)).toEqual([50]);
  });

  it('stops after retries + 1 requests per URL when every answer is an error, instead of starting the round again', async () => {
    const s = await server();
    const a = s.serve('a', image);
    const b = s.serve('b', image);
    for (const name of ['a', 'b'])
      s.fault(name, ...Array.from({ length: 20 }, () => ({ kind: 'status' as const, code: 503 })));
    const r = await deploy([a, b]);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageDownloadError');
    expect(r.command_error!.details).toMatch(/failed from every URL/);
    // The helper's agent runs with ipa-image-download-connection-retries=2.
    expect(s.requests.map((q) => `${q.path}:${q.status}`)).toEqual([
      'a:503',
      'a:503',
      'a:503',
      'b:503',
      'b:503',
      'b:503',
    ]);
  });

  it('falls back to the next URL when one keeps failing', async () => {
    const s = await server();
    const bad = s.serve('bad', image);
    s.fault('bad', ...Array.from({ length: 3 }, () => ({ kind: 'status' as const, code: 503 })));
    const good = s.serve('good', image);
    const r = await deploy([bad, good]);
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => `${q.path}:${q.status}`)).toEqual(['bad:503', 'bad:503', 'bad:503', 'good:200']);
  });

  it('times out a stalled transfer and fails after the retries', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault('img', ...Array.from({ length: 10 }, () => ({ kind: 'stall-after' as const, bytes: 512 * 1024 })));
    const r = await deploy([url], {}, { 'ipa-image-download-connection-retries': '1' });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error!.type).toBe('ImageDownloadError');
    expect(r.command_error!.details).toMatch(/timeout/i);
  });

  it('gives up with ImageDownloadTimeoutError (408) when ipa-image-download-max-duration passes, even mid-stall', async () => {
    const s = await server();
    const url = s.serve('img', image);
    s.fault('img', { kind: 'stall-after', bytes: 512 * 1024 });
    const clock = new VirtualClock();
    const result = deploy(
      [url],
      {},
      { 'ipa-image-download-connection-timeout': '30', 'ipa-image-download-max-duration': '60' },
      undefined,
      clock,
    );
    // The body has stalled (the server sent its part): a minute passes on the agent's clock.
    await expect.poll(() => s.requests.length).toBe(1);
    await new Promise((resolve) => setTimeout(resolve, 200));
    clock.advance(61_000);
    const r = await result;
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'ImageDownloadTimeoutError', code: 408 });
  });

  it('goes through the proxy image_info names, and not when no_proxy covers the host', async () => {
    const s = await server();
    const url = s.serve('img', image);
    const proxy = await startProxy();
    servers.push(proxy);
    const r = await deploy([url], { proxies: { http: proxy.url } });
    expect(r.command_error).toBeNull();
    expect(proxy.seen).toEqual([url]);
    await expectImageOnDisk();

    // A dead proxy: the download can only work when no_proxy sends it direct.
    const direct = await deploy([url], { proxies: { http: 'http://127.0.0.1:9' }, no_proxy: 'example.org,127.0.0.1' });
    expect(direct.command_error).toBeNull();
    expect(proxy.seen.length).toBe(1);
  });

  it('verifies HTTPS servers, directly or through a CONNECT proxy: refused when untrusted, accepted with ipa-cafile or ipa-insecure', async (ctx) => {
    if ((await execa('openssl', ['version'], { reject: false })).exitCode !== 0) {
      console.warn('skipped: openssl is not installed, so no test certificate can be made');
      ctx.skip();
    }
    const tls = await selfSignedCert(work.dir);
    const s = await server({ tls });
    const url = s.serve('img', image);
    expect(url.startsWith('https://')).toBe(true);
    const untrusted = await deploy([url], {}, { 'ipa-image-download-connection-retries': '0' });
    expect(untrusted.command_status).toBe('FAILED');
    expect(untrusted.command_error!.details).toMatch(/certificate/i);
    expect((await deploy([url], {}, { 'ipa-cafile': tls.certFile })).command_error).toBeNull();
    expect((await deploy([url], {}, { 'ipa-insecure': 'true' })).command_error).toBeNull();
    await expectImageOnDisk();

    // Through the https proxy, a CONNECT tunnel, and the server's certificate still checked at the far end.
    const proxy = await startProxy();
    servers.push(proxy);
    const proxies = { http: 'http://127.0.0.1:9', https: proxy.url };
    const tunnelled = await deploy([url], { proxies }, { 'ipa-cafile': tls.certFile });
    expect(tunnelled.command_error).toBeNull();
    expect(proxy.seen).toEqual([new URL(url).host]);
    const unchecked = await deploy([url], { proxies }, { 'ipa-image-download-connection-retries': '0' });
    expect(unchecked.command_error!.details).toMatch(/certificate/i);
  });

  it('speaks HTTP/1.1 to an HTTPS server or proxy that also offers HTTP/2, as IPA does (the path the fault tests cover)', async (ctx) => {
    if ((await execa('openssl', ['version'], { reject: false })).exitCode !== 0) {
      console.warn('skipped: openssl is not installed, so no test certificate can be made');
      ctx.skip();
    }
    const tls = await selfSignedCert(work.dir);
    const s = await server({ tls, h2: true });
    const url = s.serve('img', image);
    const r = await deploy([url], {}, { 'ipa-cafile': tls.certFile });
    expect(r.command_error).toBeNull();
    await expectImageOnDisk();
    // Through a CONNECT tunnel too, where undici opens the TLS session itself.
    const proxy = await startProxy();
    servers.push(proxy);
    const tunnelled = await deploy([url], { proxies: { https: proxy.url } }, { 'ipa-cafile': tls.certFile });
    expect(tunnelled.command_error).toBeNull();
    expect(proxy.seen).toEqual([new URL(url).host]);
    // And through an HTTPS proxy that offers h2 as well: the connection to the proxy is HTTP/1.1 too.
    const tlsProxy = await startProxy(tls);
    servers.push(tlsProxy);
    const viaTls = await deploy([url], { proxies: { https: tlsProxy.url } }, { 'ipa-cafile': tls.certFile });
    expect(viaTls.command_error).toBeNull();
    expect(tlsProxy.alpn).toEqual(['http/1.1']);
    expect(tlsProxy.seen).toEqual([new URL(url).host]);
    expect(s.requests.map((q) => q.httpVersion)).toEqual(['1.1', '1.1', '1.1']);
  });

  it('sends the Authorization header image_info carries', async () => {
    const s = await server();
    const url = s.serve('img', image);
    const header = 'Bearer s3cr3t';
    const r = await deploy([url], { image_request_authorization: Buffer.from(header).toString('base64') });
    expect(r.command_error).toBeNull();
    expect(s.requests[0]!.authorization).toBe(header);
  });

  it('turns credentials in the URL into Basic authorization, and keeps them out of errors and logs', async () => {
    const s = await server();
    const url = s.serve('img', image).replace('http://', 'http://deployer:p%40ss%3Aword@');
    expect((await deploy([url])).command_error).toBeNull();
    expect(s.requests[0]!.authorization).toBe(`Basic ${Buffer.from('deployer:p@ss:word').toString('base64')}`);
    await expectImageOnDisk();

    // A 500 first: the retry is logged, with the URL as shown.
    s.fault('img', { kind: 'status', code: 500 });
    const ring = new LogRing();
    expect((await deploy([url], {}, {}, pino({ base: null }, ring))).command_error).toBeNull();
    const lines = ring.tail().join('\n');
    expect(lines).toContain('"url":"http://***@127.0.0.1');
    expect(lines).not.toMatch(/p%40ss|p@ss|deployer/);

    s.fault('img', { kind: 'status', code: 404 });
    const failed = await deploy([url]);
    expect(failed.command_status).toBe('FAILED');
    expect(failed.command_error!.details).toContain('http://***@127.0.0.1');
    expect(JSON.stringify(failed)).not.toMatch(/p%40ss|p@ss|deployer/);
  });

  it('keeps credentials out of checksum-file and config-drive errors, and sends them to the checksum server', async () => {
    const s = await server();
    const withSecret = (u: string) => u.replace('http://', 'http://deployer:s3cret@');
    const url = s.serve('img', image);
    const sums = withSecret(s.serve('img.sha256', Buffer.from(`${digest}  some-other-file\n`)));
    const badSums = await deploy([url], { os_hash_value: sums });
    expect(badSums.command_error!.details).toMatch(/does not contain name img/);
    expect(s.requests.find((q) => q.path === 'img.sha256')!.authorization).toBe(
      `Basic ${Buffer.from('deployer:s3cret').toString('base64')}`,
    );

    const drive = withSecret(s.serve('drive', Buffer.from('not a config drive')));
    const badDrive = await deploy([url], { configdrive: drive });
    expect(badDrive.command_error!.details).toContain('http://***@127.0.0.1');
    for (const r of [badSums, badDrive]) {
      expect(r.command_status).toBe('FAILED');
      expect(JSON.stringify(r)).not.toMatch(/s3cret|deployer/);
    }
  });

  it('follows a redirect to another server, without handing it the credentials of the first', async () => {
    const s = await server();
    const target = s.serve('img', image);
    const seen: (string | undefined)[] = [];
    const redirector = createServer((req, res) => {
      seen.push(req.headers.authorization);
      res.writeHead(302, { location: target }).end();
    });
    await new Promise<void>((resolve) => redirector.listen(0, '127.0.0.1', resolve));
    servers.push({ close: () => new Promise<void>((resolve) => redirector.close(() => resolve())) });
    const port = (redirector.address() as AddressInfo).port;
    expect((await deploy([`http://deployer:secret@127.0.0.1:${port}/img`])).command_error).toBeNull();
    await expectImageOnDisk();
    expect(seen).toEqual([`Basic ${Buffer.from('deployer:secret').toString('base64')}`]);
    expect(s.requests.map((q) => q.authorization)).toEqual([undefined]);
  });

  it("prefers image_info's own authorization to credentials in the URL", async () => {
    const s = await server();
    const url = s.serve('img', image).replace('http://', 'http://deployer:secret@');
    const r = await deploy([url], { image_request_authorization: Buffer.from('Bearer t0ken').toString('base64') });
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => q.authorization)).toEqual(['Bearer t0ken']);
  });
});

describe('Content-Encoding on the image answer', () => {
  /** A server that sends the image with `encoding` applied, whatever the agent asked for; logs what it was asked. */
  async function encodingServer(
    encoding: string,
    body: Buffer,
  ): Promise<{ url: string; asked: (string | undefined)[] }> {
    const asked: (string | undefined)[] = [];
    const srv = createServer((req, res) => {
      asked.push(req.headers['accept-encoding']);
      res.writeHead(200, { 'content-encoding': encoding, 'content-length': body.length }).end(body);
    });
    await new Promise<void>((resolve) => srv.listen(0, '127.0.0.1', resolve));
    servers.push({ close: () => new Promise<void>((resolve) => srv.close(() => resolve())) });
    return { url: `http://127.0.0.1:${(srv.address() as AddressInfo).port}/img`, asked };
  }

  it.each([
    ['gzip', true],
    ['x-gzip', false],
    ['deflate', true],
    ['br', false],
  ] as const)(
    "%s is decoded before hashing and writing (streamed: %s), as IPA's HTTP client does",
    async (encoding, stream) => {
      const encoded = { gzip: gzipSync, 'x-gzip': gzipSync, deflate: deflateSync, br: brotliCompressSync }[encoding](
        image,
      );
      const { url, asked } = await encodingServer(encoding, encoded);
      await paint(loop.path, loop.sizeBytes);
      // The checksum is the decoded image's; a hash of the wire bytes would fail it.
      const r = await deploy([url], { stream_raw_images: stream });
      expect(r.command_error).toBeNull();
      expect(asked).toEqual(['identity']);
      await expectImageOnDisk();
    },
  );

  it('refuses an encoding it cannot decode, naming it, and leaves the disk untouched', async () => {
    const { url } = await encodingServer('compress', image);
    await paint(loop.path, loop.sizeBytes);
    const r = await deploy([url]);
    expect(r.command_error!.type).toBe('ImageDownloadError');
    expect(r.command_error!.details).toMatch(/Content-Encoding compress/);
    expect(await isPainted(loop.path, loop.sizeBytes)).toBe(true);
  });
});

describe('a zstd image (decoded by `zstd -dc | dd`) under the same faults', () => {
  let unpacked: Buffer;
  let packed: Buffer;
  let packedDigest: string;

  beforeAll(async () => {
    // Mostly random, so that the packed image is several MiB and the faults land in its middle.
    const img = await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 10, name: 'faults-zstd.raw', randomKiB: 4096 });
    unpacked = await readFile(img.path);
    packed = await readFile(await compress(img.path, 'zstd'));
    packedDigest = createHash('sha256').update(packed).digest('hex');
    expect(packed.length).toBeGreaterThan(3 * MiB);
  });

  it('resumes mid-stream with ranges, the decoder carrying on', async () => {
    const s = await server();
    const url = s.serve('img.zst', packed);
    s.fault('img.zst', { kind: 'close-after', bytes: 1 * MiB });
    const r = await deploy([url], { os_hash_value: packedDigest });
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => q.status)).toEqual([200, 206]);
    await expectImageOnDisk(unpacked);
  });

  it('starts over from byte zero without ranges, with a fresh decoder', async () => {
    const s = await server({ ranges: false });
    const url = s.serve('img.zst', packed);
    s.fault('img.zst', { kind: 'close-after', bytes: 2 * MiB });
    await paint(loop.path, loop.sizeBytes);
    const r = await deploy([url], { os_hash_value: packedDigest });
    expect(r.command_error).toBeNull();
    expect(s.requests.map((q) => [q.range ?? null, q.status])).toEqual([
      [null, 200],
      [null, 200],
    ]);
    await expectImageOnDisk(unpacked);
  });
});
