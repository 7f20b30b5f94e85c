// The heartbeat schedule on virtual time (a clock whose sleeps end at once up to a horizon), against
// the fake conductor over real HTTP: intervals after success and failure, and the early heartbeat
// after an async command (coalesced to one per 5 s, periodic ones kept).
import { afterEach, describe, expect, it } from 'vitest';
import { createAgent } from '../../agent/agent.ts';
import { command } from '../../agent/commands/types.ts';
import { Heartbeater, type BeatEvent, type HeartbeatTarget } from '../../agent/conductor/heartbeat.ts';
import { IronicApi } from '../../agent/conductor/ironic-api.ts';
import { ConductorLink } from '../../agent/conductor/link.ts';
import { nullLogger } from '../../agent/log.ts';
import { linkedConfig } from '../helpers/linked-config.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function setup(heartbeatTimeoutS = 300, clock = new VirtualClock({ start: 1_000_000 }), random = Math.random) {
  const fake = await FakeConductor.start({ requireTls: false });
  const node = fake.addNode({ macs: ['52:54:00:12:34:56'] });
  node.internal.agent_secret_token = 't'.repeat(43);
  const api = new IronicApi({ urls: [fake.url], timeoutS: 2, insecure: false, log: nullLogger });
  const target: HeartbeatTarget = {
    nodeUuid: node.uuid,
    callbackUrl: 'http://127.0.0.1:9999',
    version: 115,
    heartbeatTimeoutS,
    agentVersion: '0.1.0',
    token: () => 't'.repeat(43),
  };
  const hb = new Heartbeater(target, { api, clock, random, log: nullLogger });
  const beats: BeatEvent[] = [];
  hb.on('beat', (e) => beats.push(e));
  cleanups.push(async () => {
    await hb.stop();
    await api.close();
    await fake.close();
  });
  return { fake, hb, beats, clock };
}

async function beatsUntil(beats: BeatEvent[], n: number): Promise<void> {
  await expect.poll(() => beats.length, { timeout: 15_000 }).toBeGreaterThanOrEqual(n);
}

const gaps = (beats: BeatEvent[]) => beats.slice(1).map((b, i) => b.at - beats[i]!.at);

describe('heartbeat schedule', () => {
  it('beats at once, then every heartbeat_timeout × U(0.3, 0.6) after a 202', async () => {
    const { hb, beats, fake } = await setup(300);
    hb.start();
    await beatsUntil(beats, 8);
    await hb.stop();
    expect(beats.every((b) => b.ok && b.status === 202)).toBe(true);
    for (const gap of gaps(beats)) {
      expect(gap).toBeGreaterThanOrEqual(90_000);
      expect(gap).toBeLessThanOrEqual(180_000);
    }
    const hb0 = fake.heartbeats[0]!;
    expect(hb0.headers['x-openstack-ironic-api-version']).toBe('1.68');
    expect(hb0.headers['content-type']).toBe('application/json');
    expect(hb0.rawBody).toBe(
      `{"callback_url":"http://127.0.0.1:9999","agent_token":"${'t'.repeat(43)}","agent_version":"0.1.0"}`,
    );
  });

  it('uses exactly the ends of the range for random 0 and 1', async () => {
    for (const [r, want] of [
      [0, 30_000],
      [1, 60_000],
    ] as const) {
      const { hb, beats } = await setup(100, new VirtualClock({ start: 1_000_000 }), () => r);
      hb.start();
      await beatsUntil(beats, 3);
      await hb.stop();
      expect(gaps(beats).slice(0, 2)).toEqual([want, want]);
    }
  });

  it('retries after 5 × U(1, 2) s on errors, 409 included, then returns to the normal interval', async () => {
    const { hb, beats, fake } = await setup(300);
    fake.queueHeartbeat(500, 409, 503);
    hb.start();
    await beatsUntil(beats, 5);
    await hb.stop();
    expect(beats.slice(0, 4).map((b) => b.status)).toEqual([500, 409, 503, 202]);
    for (const gap of gaps(beats).slice(0, 3)) {
      expect(gap).toBeGreaterThanOrEqual(5000);
      expect(gap).toBeLessThanOrEqual(10_000);
    }
    expect(gaps(beats)[3]).toBeGreaterThanOrEqual(90_000);
  });

  it('beats when due even if the sleeps add up a hair short in floating point (no extra loop pause)', async () => {
    // With this draw the retry interval is 5200.2 ms, and 1e6 + 5200 + 0.2 - 1e6 comes out just below it.
    const { hb, beats, fake } = await setup(300, new VirtualClock({ start: 1_000_000 }), () => 0.04004);
    fake.queueHeartbeat(500, 500);
    hb.start();
    await beatsUntil(beats, 2);
    await hb.stop();
    expect(beats[0]!.nextIntervalMs).toBeCloseTo(5200.2, 6);
    expect(gaps(beats)[0]).toBeGreaterThanOrEqual(5199.2);
    expect(gaps(beats)[0]).toBeLessThan(5201.2);
  });

  it('treats an unreachable conductor as an error', async () => {
    const { hb, beats, fake } = await setup(300);
    await fake.close();
    hb.start();
    await beatsUntil(beats, 2);
    await hb.stop();
    expect(beats[0]).toMatchObject({ ok: false, status: undefined });
    expect(beats[0]!.reason).toMatch(/ECONNREFUSED/);
    expect(gaps(beats)[0]).toBeGreaterThanOrEqual(5000);
  });

  it('reports a 400 "Invalid or missing agent token" as token-rejected', async () => {
    const { hb, fake } = await setup(300);
    const node = [...fake.nodes.values()][0]!;
    fake.powerAction(node.uuid);
    const rejected = new Promise<string>((resolve) => hb.once('token-rejected', resolve));
    hb.start();
    expect(await rejected).toBe('Invalid or missing agent token received.');
  });

  it('a forced heartbeat waits until more than 5 s after the previous one, and pokes coalesce', async () => {
    const clock = new VirtualClock({ start: 1_000_000, horizon: 0 });
    const { hb, beats } = await setup(300, clock);
    const start = clock.now();
    clock.advanceTo(start);
    hb.start();
    await beatsUntil(beats, 1);
    hb.force();
    hb.force();
    clock.advanceTo(start + 4000);
    clock.advanceTo(start + 20_000);
    await beatsUntil(beats, 2);
    clock.advanceTo(start + 60_000);
    // A second forced beat that did not coalesce would be due by now: give its request time to land.
    await new Promise((r) => setTimeout(r, 500));
    expect(beats[1]!.forced).toBe(true);
    expect(beats[1]!.at - beats[0]!.at).toBeGreaterThan(5000);
    expect(beats[1]!.at - beats[0]!.at).toBeLessThan(5200);
    expect(beats).toHaveLength(2);
  });
});

// The NIC list is handed to the link, so these run on any host, with or without a physical NIC.
const macs = ['52:54:00:12:34:56'];
const nics = async () => macs;
describe('early heartbeat after an async command (link)', () => {
  it('heartbeats again once the command ends, not before 5 s, while the periodic one is minutes away', async () => {
    let finish: () => void = () => {};
    const fake = await FakeConductor.start({ nodes: [{ macs }] });
    cleanups.push(() => fake.close());
    const config = linkedConfig(fake.url);
    const agent = createAgent(config, nullLogger, {
      registry: {
        test: {
          slow: command({ mode: 'async', parse: () => ({}), run: () => new Promise<void>((r) => (finish = r)) }),
        },
      },
    });
    const clock = new VirtualClock({ start: 1_000_000, horizon: 0 });
    const link = new ConductorLink(agent, config, nullLogger, { clock, nics });
    cleanups.push(() => link.stop());
    clock.advanceTo(clock.now());
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length === 1, 'the first heartbeat');
    const t0 = clock.now();
    const node = [...fake.nodes.values()][0]!;
    const client = fake.clientFor(node.uuid);
    cleanups.push(() => client.close());

    await client.command('test.slow', {});
    clock.advanceTo(t0 + 3000);
    finish();
    await expect.poll(async () => (await client.lastCommand())?.command_status).toBe('SUCCEEDED');
    // An early heartbeat sent before its 5 s would have had time to land.
    await new Promise((r) => setTimeout(r, 500));
    expect(fake.heartbeats).toHaveLength(1);
    clock.advanceTo(t0 + 5200);
    await fake.waitFor(() => fake.heartbeats.length === 2, 'the early heartbeat');
    expect(fake.heartbeats[1]!.status).toBe(202);
  });
});
