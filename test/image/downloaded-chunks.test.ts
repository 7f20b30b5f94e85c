// Downloaded chunks freed once the block writer has copied them (agent/image/downloaded-chunks.ts): only chunks
// the HTTP source marked and that are the whole of their memory, and never at the cost of a byte. Real HTTP on
// loopback, the writer in its plain-file mode (no device needed).
import { randomBytes } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { Dispatchers } from '../../agent/image/dispatchers.ts';
import { freeDownloaded, markDownloaded } from '../../agent/image/downloaded-chunks.ts';
import { get } from '../../agent/image/http-body.ts';
import { BlockWriter } from '../../agent/image/sinks/block-writer.ts';
import { workDir } from '../helpers/make-image.ts';
import { selfSignedCert, startImageServer } from '../helpers/image-server.ts';
import { startRawHttpServer } from '../helpers/raw-http-server.ts';

const MiB = 1024 * 1024;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

/** A chunk that is the whole of its own memory, as a socket read is. */
function wholeChunk(size: number): Buffer {
  return Buffer.from(new ArrayBuffer(size));
}

const isWhole = (c: Buffer) => c.byteOffset === 0 && c.byteLength === c.buffer.byteLength;
/** Whether a chunk's memory was handed back (a SharedArrayBuffer never is). */
const freed = (c: Buffer) => c.buffer instanceof ArrayBuffer && c.buffer.detached;

describe('freeDownloaded', () => {
  it('frees a marked chunk that is all of its memory, once', () => {
    const chunk = wholeChunk(64 * 1024);
    markDownloaded(chunk);
    freeDownloaded(chunk);
    expect(freed(chunk)).toBe(true);
    expect(chunk.length).toBe(0);
    expect(() => freeDownloaded(chunk)).not.toThrow();
  });

  it('leaves alone a chunk that was not marked, one that shares its memory, and a small one', () => {
    const unmarked = wholeChunk(64 * 1024);
    freeDownloaded(unmarked);
    const memory = wholeChunk(64 * 1024);
    const view = memory.subarray(4096);
    const prefix = memory.subarray(0, 32 * 1024);
    markDownloaded(view);
    markDownloaded(prefix);
    freeDownloaded(view);
    freeDownloaded(prefix);
    const small = wholeChunk(8 * 1024);
    markDownloaded(small);
    freeDownloaded(small);
    for (const b of [unmarked, memory, small]) expect(freed(b)).toBe(false);
    expect(view.length).toBe(60 * 1024);
  });
});

describe('the block writer and freed chunks', () => {
  it('refuses a chunk freed before it arrived (its bytes would be lost without a word)', async () => {
    const { dir, cleanup } = await workDir('ina-chunks-');
    cleanups.push(cleanup);
    const chunk = wholeChunk(64 * 1024);
    markDownloaded(chunk);
    freeDownloaded(chunk);
    const writer = await BlockWriter.open(join(dir, 'image.raw'), MiB, null);
    cleanups.push(() => writer.release());
    await expect(pipeline([chunk], writer)).rejects.toThrow(
      'a downloaded chunk was freed before the block writer used it',
    );
  });
});

describe('an image downloaded into the block writer', () => {
  /** Serves `image` as the test says, downloads it through the agent's dispatcher into a block writer on a file. */
  async function download(image: Buffer, serve: (dir: string) => Promise<{ url: string; caFile?: string }>) {
    const { dir, cleanup } = await workDir('ina-chunks-');
    cleanups.push(cleanup);
    const { url, caFile } = await serve(dir);
    const dispatchers = new Dispatchers({
      connectTimeoutMs: 5000,
      stallTimeoutMs: 5000,
      insecure: false,
      minTlsVersion: '1.2',
      proxies: {},
      ...(caFile ? { caFile } : {}),
    });
    cleanups.push(() => dispatchers.close());
    const out = join(dir, 'image.raw');
    const writer = await BlockWriter.open(out, image.length, null);
    cleanups.push(() => writer.release());
    const res = await get(dispatchers.forUrl(new URL(url)), url, {}, undefined);
    expect(res.statusCode).toBe(200);
    const seen: { chunk: Buffer; whole: boolean }[] = [];
    async function* watched(): AsyncGenerator<Buffer> {
      let n = 0;
      for await (const chunk of res.body) {
        seen.push({ chunk, whole: isWhole(chunk) && chunk.length >= 16 * 1024 });
        // A reader slower than the socket: undici pauses its parser and gives bytes back to the socket.
        if (++n % 4 === 0) await sleep(2);
        yield chunk;
      }
    }
    await pipeline(watched(), writer);
    expect((await readFile(out)).equals(image)).toBe(true);
    return seen;
  }

  /** Only chunks that own their memory are freed, and all of those. */
  function freedExactlyTheWholeOnes(seen: { chunk: Buffer; whole: boolean }[]): number {
    const gone = seen.filter((s) => freed(s.chunk));
    expect(gone.every((s) => s.whole)).toBe(true);
    expect(seen.filter((s) => s.whole).every((s) => freed(s.chunk))).toBe(true);
    return gone.length;
  }

  for (const behaviour of ['close', 'keep-alive'] as const) {
    it(`writes every byte and frees the socket reads it copied (HTTP, ${behaviour})`, async () => {
      const image = randomBytes(12 * MiB + 777);
      const seen = await download(image, async () => {
        const server = await startRawHttpServer({ behaviour: () => behaviour });
        cleanups.push(() => server.close());
        return { url: server.serve('image.raw', image) };
      });
      // Node hands each socket read over as memory of its own: most of a 12 MiB body is freed at once.
      expect(freedExactlyTheWholeOnes(seen)).toBeGreaterThan(seen.length / 2);
      // The first chunk shares its read with the response's headers.
      expect(seen[0]!.whole).toBe(false);
    });
  }

  it('writes every byte over HTTPS, freeing only chunks that own their memory', async () => {
    const image = randomBytes(6 * MiB + 5);
    const seen = await download(image, async (dir) => {
      const { key, cert, certFile } = await selfSignedCert(dir);
      const server = await startImageServer({ tls: { key, cert } });
      cleanups.push(() => server.close());
      return { url: server.serve('image.raw', image), caFile: certFile };
    });
    freedExactlyTheWholeOnes(seen);
  });
});
