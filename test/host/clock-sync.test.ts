// ipa-ntp-server: one SNTP exchange with a server the test runs on loopback (answering two hours ahead),
// the replies a client must not believe, and the clock set through `date`/`hwclock` stand-ins on PATH
// (checked to be the stand-ins before anything runs: the host's clock is never set).
import { execFileSync } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import pino from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { ntpTime, syncClock } from '../../agent/host/clock-sync.ts';
import { LogRing } from '../../agent/log.ts';
import { installFakes } from '../helpers/fake-tools.ts';

const AHEAD_MS = 2 * 3600 * 1000;
const NTP_EPOCH_OFFSET_S = 2_208_988_800;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function stamp(buf: Buffer, at: number, ms: number): void {
  buf.writeUInt32BE(Math.floor(ms / 1000) + NTP_EPOCH_OFFSET_S, at);
  buf.writeUInt32BE(Math.floor(((ms % 1000) / 1000) * 2 ** 32), at + 4);
}

/** An SNTP server whose clock runs AHEAD_MS ahead; `shape` may spoil its reply. */
async function ntpServer(shape: (reply: Buffer) => void = () => undefined): Promise<{ port: number; queries: number }> {
  const socket: Socket = createSocket('udp4');
  const state = { port: 0, queries: 0 };
  socket.on('message', (query, from) => {
    state.queries++;
    const reply = Buffer.alloc(48);
    reply[0] = 0x24; // LI 0, version 4, mode 4 (server)
    reply[1] = 2;
    query.copy(reply, 24, 40, 48);
    stamp(reply, 32, Date.now() + AHEAD_MS);
    stamp(reply, 40, Date.now() + AHEAD_MS);
    shape(reply);
    socket.send(reply, from.port, from.address);
  });
  await new Promise<void>((resolve) => socket.bind(0, '127.0.0.1', resolve));
  state.port = (socket.address() as AddressInfo).port;
  cleanups.push(() => new Promise<void>((resolve) => socket.close(() => resolve())));
  return state;
}

describe('ntpTime', () => {
  it("takes the server's time, measured over the exchange", async () => {
    const server = await ntpServer();
    const now = await ntpTime('127.0.0.1', { port: server.port });
    expect(Math.abs(now - (Date.now() + AHEAD_MS))).toBeLessThan(1000);
    expect(server.queries).toBe(1);
  });

  it.each([
    ['a reply that does not echo our transmit time', (r: Buffer) => r.fill(0, 24, 32), /no answer .* within 500 ms/],
    ['an unsynchronised server (stratum 0, a kiss-of-death)', (r: Buffer) => (r[1] = 0), /not synchronised/],
    ['an alarm leap indicator', (r: Buffer) => (r[0] = 0xe4), /not synchronised/],
    ['a reply in client mode', (r: Buffer) => (r[0] = 0x23), /answered in mode 3/],
  ])('refuses %s', async (_what, spoil, why) => {
    const server = await ntpServer(spoil);
    await expect(ntpTime('127.0.0.1', { port: server.port, timeoutMs: 500 })).rejects.toThrow(why);
  });
});

describe('syncClock', () => {
  it('with real host actions, sets the clock with date and the RTC with hwclock', async () => {
    const fakes = await installFakes({ date: '', hwclock: '' });
    cleanups.push(() => fakes.close());
    // The stand-ins must be what runs: this test must never set the host's clock.
    for (const tool of ['date', 'hwclock'])
      expect(execFileSync('sh', ['-c', `command -v ${tool}`], { encoding: 'utf8' }).trim()).toBe(
        `${fakes.dir}/${tool}`,
      );
    const server = await ntpServer();
    const ring = new LogRing();
    await syncClock('127.0.0.1', 'real', pino({ base: null }, ring), { port: server.port });
    const [dateArgs] = await fakes.calls('date');
    expect(dateArgs!.slice(0, 2)).toEqual(['-u', '-s']);
    const setTo = Number(dateArgs![2]!.slice(1)) * 1000;
    expect(Math.abs(setTo - (Date.now() + AHEAD_MS))).toBeLessThan(2000);
    expect(await fakes.calls('hwclock')).toEqual([['-u', '-w']]);
    expect(ring.tail().join('\n')).toMatch(/"offsetMs":7[12]\d{5}.*clock set from the NTP server/);
  });

  it('with simulated host actions, only logs the offset; without an answer, warns and goes on', async () => {
    const fakes = await installFakes({ date: '', hwclock: '' });
    cleanups.push(() => fakes.close());
    const server = await ntpServer();
    const ring = new LogRing();
    await syncClock('127.0.0.1', 'simulated', pino({ base: null }, ring), { port: server.port });
    expect(await fakes.calls('date')).toEqual([]);
    expect(ring.tail().join('\n')).toMatch(/"offsetMs":7[12]\d{5}.*clock left as it is/);
    const silent = await ntpServer((r) => r.fill(0, 24, 32));
    await syncClock('127.0.0.1', 'real', pino({ base: null }, ring), { port: silent.port, timeoutMs: 300 });
    expect(await fakes.calls('date')).toEqual([]);
    expect(ring.tail().join('\n')).toMatch(/clock not synchronised: the NTP server did not answer/);
  });
});
