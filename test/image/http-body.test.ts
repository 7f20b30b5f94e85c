// The image body read straight from undici's dispatch handler (agent/image/http-body.ts) and the transfer
// around it: every byte in order through the paused and resumed queue, a cancel that ends the connection
// and is not taken for a break to resume, an abort before any answer. Real HTTP on loopback.
import { randomBytes } from 'node:crypto';
import { createServer, type Server, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { realClock } from '../../agent/clock.ts';
import { Dispatchers } from '../../agent/image/dispatchers.ts';
import { get } from '../../agent/image/http-body.ts';
import { Transfer } from '../../agent/image/transfer.ts';
import { LogRing } from '../../agent/log.ts';
import { startRawHttpServer, type Behaviour, type RawHttpServer } from '../helpers/raw-http-server.ts';
import { until } from '../helpers/until.ts';

const MiB = 1024 * 1024;
const cleanups: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  for (const c of cleanups.splice(0).reverse()) await c();
});

function dispatchers(): Dispatchers {
  const d = new Dispatchers({
    connectTimeoutMs: 5000,
    stallTimeoutMs: 5000,
    insecure: false,
    minTlsVersion: '1.2',
    proxies: {},
  });
  cleanups.push(() => d.close());
  return d;
}

async function server(behaviour: Behaviour): Promise<RawHttpServer> {
  const s = await startRawHttpServer({ behaviour: () => behaviour });
  cleanups.push(() => s.close());
  return s;
}

function transfer(ring: LogRing): Transfer {
  return new Transfer(dispatchers(), {
    retries: 3,
    retryIntervalMs: 10,
    maxDurationMs: 0,
    log: pino({ base: null }, ring),
    clock: realClock,
  });
}

describe('the image body from the dispatch handler', () => {
  it('gives every byte in order to a reader slower than the download (the queue pauses it and resumes it)', async () => {
    const image = randomBytes(6 * MiB);
    const s = await server('close');
    const url = s.serve('image.raw', image);
    const opened = await transfer(new LogRing()).open([url]);
    const parts: Buffer[] = [];
    let n = 0;
    for await (const chunk of opened.body) {
      parts.push(Buffer.from(chunk));
      if (++n % 8 === 0) await sleep(5);
    }
    expect(Buffer.concat(parts).equals(image)).toBe(true);
  });

  it('a cancel while a read waits on a stalled server ends that read and the connection, and asks for no resume', async () => {
    const ring = new LogRing();
    const s = await server('stall');
    const url = s.serve('image.raw', randomBytes(2 * MiB));
    const opened = await transfer(ring).open([url]);
    const it = opened.body[Symbol.asyncIterator]();
    let got = 0;
    // The server sends half the image, then nothing: read until a read has to wait.
    let waiting: Promise<IteratorResult<Buffer>>;
    for (;;) {
      waiting = it.next();
      const r = await Promise.race([waiting, sleep(500).then(() => null)]);
      if (r === null) break;
      expect(r.done).toBe(false);
      got += (r.value as Buffer).length;
    }
    expect(got).toBe(MiB);
    opened.cancel();
    await expect(waiting).rejects.toThrow();
    await until('the connection closed', () => s.openSockets === 0);
    await sleep(200);
    expect(s.requests).toHaveLength(1);
    expect(ring.tail().filter((l) => l.includes('resum'))).toEqual([]);
  });

  it('a body the reader gives up on closes its connection', async () => {
    const s = await server('stall');
    const url = s.serve('image.raw', randomBytes(2 * MiB));
    const opened = await transfer(new LogRing()).open([url]);
    for await (const _chunk of opened.body) break;
    await until('the connection closed', () => s.openSockets === 0);
  });

  it('an abort before the server answers rejects at once', async () => {
    const sockets = new Set<Socket>();
    const silent: Server = createServer((socket) => {
      sockets.add(socket);
    });
    await new Promise<void>((resolve) => silent.listen(0, '127.0.0.1', resolve));
    cleanups.push(
      () =>
        new Promise<void>((resolve) => {
          for (const socket of sockets) socket.destroy();
          silent.close(() => resolve());
        }),
    );
    const { port } = silent.address() as { port: number };
    const url = `http://127.0.0.1:${port}/image.raw`;
    const controller = new AbortController();
    const d = dispatchers();
    const answer = get(d.forUrl(new URL(url)), url, {}, controller.signal);
    await sleep(100);
    const started = Date.now();
    controller.abort(new Error('cancelled by the test'));
    await expect(answer).rejects.toThrow('cancelled by the test');
    expect(Date.now() - started).toBeLessThan(1000);
  });
});
