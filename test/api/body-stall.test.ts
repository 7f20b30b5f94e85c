// A large body that stops arriving must not hold the one-large-body-at-a-time turn, and with it the
// conductor's requests, for ever (issue #41: a stalled 1.5 MiB body kept a 2 MiB POST waiting for minutes).
// Real HTTP on loopback; the stalling client is a raw socket that sends its headers and part of its body,
// then nothing. Time is the agent's injected clock: the test moves it past the stall deadline; a slow body that
// keeps moving (a config drive over a WAN link to an edge site) is read to its end.
import { readFileSync } from 'node:fs';
import { request } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { BODY_STALL_MS } from '../../agent/api/body-limit.ts';
import { command } from '../../agent/commands/types.ts';
import { startAgent, type RunningAgent } from '../helpers/api-harness.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';
import { until } from '../helpers/until.ts';

const TOKEN = 'tok-0123456789abcdef0123456789abcdef';
const KiB = 1024;
const MiB = 1024 * KiB;

/** Counts the deadlines the agent sets: one per body it starts reading (and one per re-arm of its stall watch). */
class WatchedClock extends VirtualClock {
  armed = 0;
  override timeout(ms: number): AbortSignal {
    this.armed++;
    return super.timeout(ms);
  }
}

const registry = { test: { echo: command({ mode: 'sync', parse: (p) => String(p.value ?? ''), run: (v) => v }) } };

/** A client that declares `declared` bytes of body, sends `sent` of them, and stalls. */
class StallingClient {
  private readonly socket: Socket;
  private received = '';
  readonly closed: Promise<string>;

  constructor(url: string, query: string, declared: number, sent: number) {
    const { port } = new URL(url);
    this.socket = connect(Number(port), '127.0.0.1');
    this.socket.setEncoding('latin1');
    this.socket.on('data', (d: string) => (this.received += d));
    this.socket.on('error', () => undefined);
    // What the agent sent before it closed the connection ('' for none).
    this.closed = new Promise((resolve) => this.socket.on('close', () => resolve(this.received)));
    this.socket.write(
      `POST /v1/commands/${query} HTTP/1.1\r\nHost: 127.0.0.1:${port}\r\nContent-Type: application/json\r\n` +
        `Content-Length: ${declared}\r\n\r\n`,
    );
    this.socket.write(Buffer.alloc(sent, 0x61));
  }

  /** The response so far (the agent may answer before the body is read, and close later). */
  async response(): Promise<string> {
    while (!this.received.includes('\r\n\r\n') && !this.socket.destroyed) {
      await new Promise((resolve) => setTimeout(resolve, 5));
    }
    return this.received;
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The conductor's POST: a whole body of `size` bytes, sent at once; resolves with the status. */
function conductorPost(url: string, size: number): Promise<number> {
  const head = '{"name": "nope.nope", "params": {"pad": "';
  const tail = '"}}';
  return new Promise((resolve, reject) => {
    const req = request(`${url}/v1/commands/?agent_token=${TOKEN}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'content-length': size },
    });
    req.on('response', (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode!));
    });
    req.on('error', reject);
    req.end(head + 'a'.repeat(size - head.length - tail.length) + tail);
  });
}

/** Bytes the kernel holds that the process on loopback port `local` has not read from its connection with `remote`. */
function unread(local: number, remote: number): number {
  const hex = (p: number) => p.toString(16).toUpperCase().padStart(4, '0');
  for (const line of readFileSync('/proc/net/tcp', 'utf8').split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f[1]?.endsWith(`:${hex(local)}`) && f[2]?.endsWith(`:${hex(remote)}`))
      return Number.parseInt(f[4]!.split(':')[1]!, 16);
  }
  return -1;
}

/** Lets the event loop run until `check` holds (the agent's progress, not time, is what is waited for). */
let agent: RunningAgent | undefined;
const clients: StallingClient[] = [];
afterEach(async () => {
  for (const c of clients.splice(0)) c.destroy();
  await agent?.close();
  agent = undefined;
});

describe('a large body that stalls', () => {
  it('loses the large-body turn at its deadline: 408 and closed, and the conductor POST waiting behind it is read', async () => {
    const clock = new WatchedClock();
    agent = await startAgent({ 'ipa-agent-token': TOKEN }, registry, undefined, clock);
    const sent = 64 * KiB;
    const stalled = new StallingClient(agent.url, `?agent_token=${TOKEN}`, 1.5 * MiB, sent);
    clients.push(stalled);
    await until('the body deadline to be set', () => clock.armed === 1);

    let answered: number | undefined;
    const conductor = conductorPost(agent.url, 2 * MiB).then((status) => (answered = status));
    // A request on another connection is served meanwhile (small bodies do not wait for the turn) ...
    const r = await fetch(`${agent.url}/v1/commands/?agent_token=${TOKEN}`, {
      method: 'POST',
      body: JSON.stringify({ name: 'test.echo', params: { value: 'small' } }),
    });
    expect(r.status).toBe(200);
    // ... while the large one waits: its body is not being read (no deadline of its own yet: the stalled body's
    // and the small one's are all there are), and it has no answer.
    expect(clock.armed).toBe(2);
    expect(answered).toBeUndefined();

    // Before the stall limit has passed since the body began nothing changes ...
    clock.advance(BODY_STALL_MS - 1);
    expect((await fetch(`${agent.url}/v1/commands/?agent_token=${TOKEN}`)).status).toBe(200);
    expect(answered).toBeUndefined();
    // ... and once it has passed since the last of the 64 KiB was read (whenever that was), the body is cut.
    clock.advance(BODY_STALL_MS);

    const said = await stalled.closed;
    if (said !== '') expect(said).toMatch(/^HTTP\/1\.1 408 /);
    expect(await conductor).toBe(404);
  });

  it('sent without the token, it is refused before its body is read and never takes the turn', async () => {
    const clock = new WatchedClock();
    agent = await startAgent({ 'ipa-agent-token': TOKEN }, registry, undefined, clock);
    const stalled = new StallingClient(agent.url, '', 1.5 * MiB, 64 * KiB);
    clients.push(stalled);
    expect(await stalled.response()).toMatch(/^HTTP\/1\.1 401 /);
    expect(await conductorPost(agent.url, 2 * MiB)).toBe(404);
    expect(clock.armed).toBe(1);
  });

  it('a slow body that keeps moving (100 KiB/s) is read to its end, however long that takes on the clock', async () => {
    const clock = new WatchedClock();
    agent = await startAgent({ 'ipa-agent-token': TOKEN }, registry, undefined, clock);
    const { port } = new URL(agent.url);
    const head = '{"name": "nope.nope", "params": {"pad": "';
    const tail = '"}}';
    const size = 4 * MiB;
    const socket = connect(Number(port), '127.0.0.1');
    socket.on('error', () => undefined);
    await new Promise((resolve) => socket.once('connect', resolve));
    let received = '';
    socket.setEncoding('latin1');
    socket.on('data', (d: string) => (received += d));
    const closed = new Promise((resolve) => socket.on('close', resolve));
    socket.write(
      `POST /v1/commands/?agent_token=${TOKEN} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n` +
        `Connection: close\r\nContent-Length: ${size}\r\n\r\n${head}`,
    );
    // The stall limit is counted from when the agent starts reading the body.
    await until('the body deadline to be set', () => clock.armed === 1);
    let left = size - head.length - tail.length;
    const step = 100 * KiB;
    // 100 KiB a second (about 0.8 Mbit/s), 41 s on the clock: the clock is moved on only once the agent has read
    // what was sent (the kernel holds none of it for the agent's socket).
    while (left > 0) {
      const n = Math.min(step, left);
      socket.write(Buffer.alloc(n, 0x61));
      left -= n;
      await until(
        'an answer, or the request read to its end',
        () => received !== '' || unread(Number(port), socket.localPort!) === 0,
      );
      for (let i = 0; i < 3; i++) await new Promise((resolve) => setImmediate(resolve));
      clock.advance(1000);
    }
    socket.end(tail);
    await closed;
    expect(received).toMatch(/^HTTP\/1\.1 404 /);
  });
});
