// A hostile conductor or inspection callback, on real sockets: replies of megabytes of nested `[`, replies
// that trickle in byte by byte, node identifiers that are paths, heartbeat_timeouts that are no durations.
// The agent must stop reading at its cap, end each exchange at one deadline on its clock, refuse a node
// identifier where it enters and encode it where it is used.
import { readFileSync } from 'node:fs';
import { createServer as createHttpServer } from 'node:http';
import { createServer, type AddressInfo, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { BodyOverCap, MAX_JSON_DEPTH, parseBoundedJson, readCapped } from '../../agent/bounded-json.ts';
import { LookupNodeError } from '../../agent/conductor/errors.ts';
import { Heartbeater, type BeatEvent } from '../../agent/conductor/heartbeat.ts';
import { ConductorUnreachable, IronicApi, MAX_REPLY_BYTES } from '../../agent/conductor/ironic-api.ts';
import { InvalidLookupReply, MIN_HEARTBEAT_TIMEOUT_S, parseLookupReply } from '../../agent/conductor/lookup-reply.ts';
import { lookupNode, lookupPath } from '../../agent/conductor/lookup.ts';
import { nodeIdentProblem } from '../../agent/conductor/node-ident.ts';
import { postInspection } from '../../agent/inspect/callback.ts';
import { nullLogger } from '../../agent/log.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';
import { until } from '../helpers/until.ts';

const MiB = 1024 * 1024;
const UUID = '1be26c0b-03f2-4d2e-ae87-c02d7f33c123';

interface Exchange {
  method: string;
  path: string;
  socket: Socket;
  /** Body bytes the kernel took from the server (write callbacks without error). */
  sent: number;
  closed: Promise<void>;
}

/** A TCP server that reads each request's head and hands the socket to `answer`, which writes what it likes. */
async function hostile(answer: (x: Exchange) => void): Promise<{ url: string; exchanges: Exchange[] }> {
  const exchanges: Exchange[] = [];
  const sockets = new Set<Socket>();
  const server = createServer((socket) => {
    sockets.add(socket);
    socket.on('error', () => socket.destroy());
    const closed = new Promise<void>((resolve) => socket.on('close', () => resolve()));
    let head = '';
    const onData = (chunk: Buffer) => {
      head += chunk.toString('latin1');
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) return;
      socket.off('data', onData);
      // The request body (small JSON) is drained and ignored.
      socket.on('data', () => undefined);
      const [method = '', path = ''] = head.slice(0, head.indexOf('\r\n')).split(' ');
      const x: Exchange = { method, path, socket, sent: 0, closed };
      exchanges.push(x);
      answer(x);
    };
    socket.on('data', onData);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  cleanups.push(async () => {
    for (const s of sockets) s.destroy();
    await new Promise((resolve) => server.close(resolve));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, exchanges };
}

function json(x: Exchange, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  x.socket.end(
    `HTTP/1.1 ${status} X\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n` +
      `Connection: close\r\n\r\n${text}`,
  );
}

/** A chunked 200 of `total` bytes of `[`, written as fast as the client takes it, counted as the kernel takes it. */
function floodOfBrackets(total: number, contentLength?: number) {
  return (x: Exchange) => {
    const framing = contentLength === undefined ? 'Transfer-Encoding: chunked' : `Content-Length: ${contentLength}`;
    x.socket.write(`HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n${framing}\r\n\r\n`);
    const piece = Buffer.alloc(64 * 1024, '[');
    const frame =
      contentLength === undefined
        ? Buffer.concat([Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n')])
        : piece;
    let queued = 0;
    const pump = () => {
      while (queued < total && !x.socket.destroyed) {
        queued += piece.length;
        const ok = x.socket.write(frame, (err) => {
          if (!err) x.sent += piece.length;
        });
        if (!ok) return void x.socket.once('drain', pump);
      }
    };
    pump();
  };
}

/** Headers at once (when `headers`), then one body byte every 20 ms of real time for as long as the client listens. */
function trickle(status: number, headers = true) {
  return (x: Exchange) => {
    if (!headers) return;
    x.socket.write(`HTTP/1.1 ${status} X\r\nContent-Type: application/json\r\nContent-Length: 1000000\r\n\r\n`);
    const timer = setInterval(() => {
      if (x.socket.destroyed) return clearInterval(timer);
      x.socket.write(' ', (err) => {
        if (!err) x.sent++;
      });
    }, 20);
    x.socket.on('close', () => clearInterval(timer));
  };
}

/** What may sit between the server's writes and the agent's reads: the two loopback socket buffers at most. */
function loopbackSlack(): number {
  const most = (f: string) => Number(readFileSync(`/proc/sys/net/ipv4/${f}`, 'utf8').trim().split(/\s+/)[2]);
  return most('tcp_rmem') + most('tcp_wmem') + MiB;
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function api(url: string, clock = new VirtualClock(), timeoutS = 30): IronicApi {
  const made = new IronicApi({ urls: [url], timeoutS, clock, insecure: false, log: nullLogger });
  cleanups.push(() => made.close());
  return made;
}

describe('the bounded JSON reader', () => {
  it('refuses nesting deeper than the bound by a flat scan, whatever the depth', () => {
    const deep = '['.repeat(5 * MiB);
    expect(() => parseBoundedJson(deep)).toThrow(`nesting deeper than ${MAX_JSON_DEPTH} levels`);
    expect(parseBoundedJson(`${'['.repeat(MAX_JSON_DEPTH)}${']'.repeat(MAX_JSON_DEPTH)}`)).toBeInstanceOf(Array);
    expect(parseBoundedJson('{"a": "[[[[["}', 2)).toEqual({ a: '[[[[[' });
  });

  it('stops reading a stream at its cap and ends the stream', async () => {
    let pulled = 0;
    let ended = false;
    async function* endless() {
      try {
        for (;;) {
          pulled++;
          yield new Uint8Array(1024);
        }
      } finally {
        ended = true;
      }
    }
    await expect(readCapped(endless(), 10 * 1024)).rejects.toBeInstanceOf(BodyOverCap);
    expect(pulled).toBe(11);
    expect(ended).toBe(true);
  });
});

describe('replies past the cap', () => {
  it('a chunked reply of `[` far past the cap is cut off near the cap, not read whole', async () => {
    const slack = loopbackSlack();
    const total = MAX_REPLY_BYTES + slack + 32 * MiB;
    const peer = await hostile(floodOfBrackets(total));
    const err = await api(peer.url)
      .send('GET', '/v1/lookup?addresses=x')
      .catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConductorUnreachable);
    expect((err as Error).message).toMatch(/reply larger than 4194304 bytes, not read further/);
    const [x] = peer.exchanges;
    await x!.closed;
    expect(x!.sent).toBeLessThanOrEqual(MAX_REPLY_BYTES + slack);
  });

  it('a Content-Length past the cap is refused before the body is read', async () => {
    const total = loopbackSlack() + 32 * MiB;
    const peer = await hostile(floodOfBrackets(total, total));
    await expect(api(peer.url).send('POST', '', { body: {} })).rejects.toThrow(/reply larger than 4194304 bytes/);
    await peer.exchanges[0]!.closed;
    expect(peer.exchanges[0]!.sent).toBeLessThanOrEqual(loopbackSlack());
  });

  it('a lookup reply nested deeper than the bound (under the cap) is refused as such', () => {
    expect(() => parseLookupReply('['.repeat(MiB))).toThrow(/not usable JSON: nesting deeper than 64 levels/);
  });

  it('an inspection callback answering with a flood of `[` fails within the inspection timeout', async () => {
    const peer = await hostile(floodOfBrackets(MAX_REPLY_BYTES + loopbackSlack() + 32 * MiB));
    const clock = new VirtualClock();
    const outcome = await postInspection(
      { inventory: {} },
      { timeoutS: 20 },
      { api: api(peer.url, clock), clock, log: nullLogger },
    );
    expect(outcome.kind).toBe('failed');
    expect(outcome.kind === 'failed' && outcome.reason).toMatch(/reply larger than/);
    for (const x of peer.exchanges) await x.closed;
    for (const x of peer.exchanges) expect(x.sent).toBeLessThanOrEqual(MAX_REPLY_BYTES + loopbackSlack());
  });
});

describe("a caller's budget over several URLs", () => {
  it('each URL gets its share of what is left: a first URL that hangs does not leave the next a millisecond', async () => {
    const asked: number[] = [];
    class Recording extends VirtualClock {
      override timeout(ms: number): AbortSignal {
        asked.push(ms);
        return super.timeout(ms);
      }
    }
    const clock = new Recording();
    let hung = 0;
    const hanging = createHttpServer(() => void hung++);
    const answering = createHttpServer((_req, res) => res.end('{}'));
    for (const server of [hanging, answering]) {
      await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
      cleanups.push(async () => {
        server.closeAllConnections();
        await new Promise((resolve) => server.close(resolve));
      });
    }
    const url = (server: typeof hanging) => `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
    const made = new IronicApi({
      urls: [url(hanging), url(answering)],
      timeoutS: 60,
      clock,
      insecure: false,
      log: nullLogger,
    });
    cleanups.push(() => made.close());
    const reply = made.send('POST', '/v1/heartbeat/x', { body: {}, withinMs: 10_000 });
    await until('the first URL to hang', () => hung === 1);
    expect(asked).toEqual([5_000]);
    clock.advance(5_000);
    expect((await reply).status).toBe(200);
    expect(asked).toEqual([5_000, 5_000]);
  });
});

describe('one deadline for a whole exchange, on the clock', () => {
  it('a body trickling in is cut off at the deadline and its connection torn down', async () => {
    const peer = await hostile(trickle(200));
    const clock = new VirtualClock();
    const sent = api(peer.url, clock, 30).send('GET', '/');
    const settled = sent.catch((e: unknown) => e);
    await until('three sends on the first exchange', () => (peer.exchanges[0]?.sent ?? 0) >= 3);
    clock.advance(29_000);
    await until('six sends on the first exchange', () => (peer.exchanges[0]?.sent ?? 0) >= 6);
    clock.advance(1_000);
    const err = await settled;
    expect(err).toBeInstanceOf(ConductorUnreachable);
    expect((err as Error).message).toMatch(/timeout: no whole reply within 30 s/);
    await peer.exchanges[0]!.closed;
  });

  it('headers that never come end at the deadline too', async () => {
    const peer = await hostile(trickle(200, false));
    const clock = new VirtualClock();
    const settled = api(peer.url, clock, 30)
      .send('GET', '/')
      .catch((e: unknown) => e);
    await until('one exchange', () => peer.exchanges.length === 1);
    clock.advance(30_000);
    expect(String(await settled)).toMatch(/timeout: no whole reply within 30 s/);
    await peer.exchanges[0]!.closed;
  });

  it('an inspection callback whose reply trickles ends "failed" within ipa-inspection-timeout', async () => {
    const peer = await hostile(trickle(200));
    const clock = new VirtualClock();
    const start = clock.now();
    const run = postInspection(
      { inventory: {} },
      { timeoutS: 20 },
      { api: api(peer.url, clock, 10), clock, log: nullLogger },
    );
    // Each attempt's reply trickles until the clock passes its deadline: 10 s, then what is left of the 20.
    for (const [n, ms] of [
      [1, 10_000],
      [2, 5_000],
    ] as const) {
      await until(
        `exchange ${n} with two sends`,
        () => peer.exchanges.length === n && peer.exchanges[n - 1]!.sent >= 2,
      );
      clock.advance(ms);
    }
    const outcome = await run;
    // 10 s for the first attempt, a 5 s pause, and the second cut at the inspection deadline.
    expect(outcome).toMatchObject({ kind: 'failed', attempts: 2 });
    expect(outcome.kind === 'failed' && outcome.reason).toMatch(/timeout: no whole reply within 5 s/);
    expect(clock.now() - start).toBe(20_000);
    for (const x of peer.exchanges) await x.closed;
  });

  it('a trickling 202 to a heartbeat counts as a failed heartbeat at the deadline, and the next one follows', async () => {
    const peer = await hostile(trickle(202));
    const clock = new VirtualClock();
    const beats: BeatEvent[] = [];
    const hb = new Heartbeater(
      {
        nodeUuid: UUID,
        callbackUrl: 'http://127.0.0.1:9999',
        version: 68,
        heartbeatTimeoutS: 6,
        agentVersion: '1',
        token: () => 'x'.repeat(43),
      },
      { api: api(peer.url, clock, 30), clock, random: () => 0, log: nullLogger },
    );
    hb.on('beat', (e) => beats.push(e));
    hb.start();
    cleanups.push(() => hb.stop());
    await until('two sends on the first exchange', () => (peer.exchanges[0]?.sent ?? 0) >= 2);
    // Cut at heartbeat_timeout, before ipa-http-request-timeout: a later 202 would be late anyway.
    clock.advance(6_000);
    await until('the first heartbeat', () => beats.length === 1);
    expect(beats[0]).toMatchObject({ ok: false, reason: expect.stringMatching(/timeout: no whole reply within 6 s/) });
    await peer.exchanges[0]!.closed;
    await until('a second exchange', () => peer.exchanges.length === 2);
    await hb.stop();
  });
});

describe('the node identifier from outside', () => {
  it.each([
    ['a path', '../../v1/nodes', /neither a UUID nor a node name/],
    ['..', '..', /neither a UUID nor a node name/],
    ['a slash', 'a/b', /neither a UUID nor a node name/],
    ['a query', 'a&node_uuid=b', /neither a UUID nor a node name/],
    ['10 KiB', 'x'.repeat(10 * 1024), /10240 characters long \(at most 255\)/],
    ['an empty string', '', /is empty/],
    ['a number', 42, /is number, not a string/],
  ])('refuses %s', (_label, v, why) => {
    expect(nodeIdentProblem(v)).toMatch(why);
  });

  it.each([UUID, UUID.toUpperCase(), 'rack1-node.07_x~'])('accepts %s', (v) => {
    expect(nodeIdentProblem(v)).toBeUndefined();
  });

  it('a lookup reply naming `../` ends the lookup at once with the reason; no heartbeat path is built from it', async () => {
    const peer = await hostile((x) =>
      json(x, 200, {
        node: { uuid: '../../v1/nodes/other' },
        config: { heartbeat_timeout: 300, agent_token: 'y'.repeat(43) },
      }),
    );
    const clock = new VirtualClock();
    const err = await lookupNode(
      { macs: ['52:54:00:aa:bb:cc'], versions: { get: async () => 68 }, heldToken: null, timeoutS: 600, intervalS: 1 },
      { api: api(peer.url, clock), clock, random: () => 0, log: nullLogger },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LookupNodeError);
    expect((err as Error).message).toMatch(
      /node\.uuid "\.\.\/\.\.\/v1\/nodes\/other" is neither a UUID nor a node name/,
    );
    expect(peer.exchanges).toHaveLength(1);
    expect(clock.sleeps).toEqual([]);
  });

  it('an inspection reply naming `../` or a 1 MiB uuid is accepted without a node: lookup goes by MAC', async () => {
    for (const uuid of ['../heartbeat/x', 'u'.repeat(MiB)]) {
      const peer = await hostile((x) => json(x, 200, { uuid }));
      const clock = new VirtualClock();
      const outcome = await postInspection({}, { timeoutS: 20 }, { api: api(peer.url, clock), clock, log: nullLogger });
      expect(outcome).toMatchObject({ kind: 'accepted', status: 200, attempts: 1 });
      expect(outcome.kind === 'accepted' && outcome.nodeUuid).toBeUndefined();
    }
  });

  it('the heartbeat path and the lookup query encode the identifier', async () => {
    expect(lookupPath({ macs: ['52:54:00:aa:bb:cc'], nodeUuid: 'a&b=c' })).toBe(
      '/v1/lookup?addresses=52:54:00:aa:bb:cc&node_uuid=a%26b%3Dc',
    );
    const peer = await hostile((x) => x.socket.end('HTTP/1.1 202 Accepted\r\nContent-Length: 0\r\n\r\n'));
    const clock = new VirtualClock();
    const hb = new Heartbeater(
      {
        nodeUuid: '../x',
        callbackUrl: 'http://h:1',
        version: 68,
        heartbeatTimeoutS: 300,
        agentVersion: '1',
        token: () => null,
      },
      { api: api(peer.url, clock), clock, random: () => 0, log: nullLogger },
    );
    hb.start();
    cleanups.push(() => hb.stop());
    await until('an exchange', () => peer.exchanges.length >= 1);
    await hb.stop();
    expect(peer.exchanges[0]!.path).toBe('/v1/heartbeat/..%2Fx');
  });
});

describe('heartbeat_timeout from the lookup reply', () => {
  const reply = (t: unknown) => JSON.stringify({ node: { uuid: UUID }, config: { heartbeat_timeout: t } });

  it.each([
    [0, /config\.heartbeat_timeout 0 is not a positive number of seconds/],
    [-5, /config\.heartbeat_timeout -5 is not a positive number of seconds/],
    ['soon', /config\.heartbeat_timeout "soon" is not a number of seconds/],
    [true, /config\.heartbeat_timeout true is not a number of seconds/],
    [[5], /config\.heartbeat_timeout \[5\] is not a number of seconds/],
    ['', /config\.heartbeat_timeout "" is not a number of seconds/],
  ])('refuses %j, naming it, as a lasting refusal', (t, why) => {
    let err: unknown;
    try {
      parseLookupReply(reply(t));
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidLookupReply);
    expect((err as InvalidLookupReply).lasting).toBe(true);
    expect((err as Error).message).toMatch(why);
  });

  it('raises a value below the floor to it, and says so', () => {
    const tiny = parseLookupReply(reply(0.001)).config;
    expect(tiny.heartbeatTimeoutS).toBe(MIN_HEARTBEAT_TIMEOUT_S);
    expect(tiny.heartbeatTimeoutRaisedFrom).toBe(0.001);
    const usual = parseLookupReply(reply('300')).config;
    expect(usual.heartbeatTimeoutS).toBe(300);
    expect(usual.heartbeatTimeoutRaisedFrom).toBeUndefined();
  });

  it('a lookup answered with heartbeat_timeout 0 ends at once, naming the value', async () => {
    const peer = await hostile((x) => json(x, 200, JSON.parse(reply(0))));
    const clock = new VirtualClock();
    const err = await lookupNode(
      {
        macs: ['52:54:00:aa:bb:cc'],
        versions: { get: async () => 68 },
        heldToken: 'z'.repeat(43),
        timeoutS: 600,
        intervalS: 1,
      },
      { api: api(peer.url, clock), clock, random: () => 0, log: nullLogger },
    ).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LookupNodeError);
    expect((err as Error).message).toMatch(/heartbeat_timeout 0 is not a positive number of seconds/);
    expect(peer.exchanges).toHaveLength(1);
  });
});
