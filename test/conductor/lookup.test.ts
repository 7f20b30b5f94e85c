// Lookup retry schedule on virtual time against the fake conductor: IPA's random exponential backoff,
// the 5/10/30 s pauses after 409, the "******" rule and the timeout.
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { LookupNodeError } from '../../agent/conductor/errors.ts';
import { IronicApi } from '../../agent/conductor/ironic-api.ts';
import { lookupNode, type LookupRequest } from '../../agent/conductor/lookup.ts';
import { nullLogger } from '../../agent/log.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';

const MAC = '52:54:00:aa:bb:cc';
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A conductor whose API version is known to be 1.`minor`. */
const at = (minor: number) => ({ get: async () => minor });

function lookupWith(urls: string[], req: Partial<LookupRequest> = {}, random = Math.random) {
  const api = new IronicApi({
    urls,
    timeoutS: 1,
    insecure: false,
    log: nullLogger,
    requestId: 'req-0b5e1d0c-6b1f-4a4e-9c59-3f0e8f4f2b7a',
  });
  cleanups.push(() => api.close());
  const clock = new VirtualClock({ start: 0 });
  const run = lookupNode(
    { macs: [MAC], versions: at(115), heldToken: null, timeoutS: 600, intervalS: 1, ...req },
    { api, clock, random, log: nullLogger },
  );
  return { run, clock };
}

async function conductor(): Promise<FakeConductor> {
  const fake = await FakeConductor.start({ nodes: [{ macs: [MAC] }] });
  cleanups.push(() => fake.close());
  return fake;
}

describe('lookup retries', () => {
  it('pauses 5, 10, then 30 s (and stays at 30) after each 409, besides the backoff', async () => {
    const fake = await conductor();
    fake.queueLookup(409, 409, 409, 409);
    const { run, clock } = lookupWith([fake.url], {}, () => 0);
    const found = await run;
    expect(found.token).toHaveLength(43);
    // random 0 → each backoff is the lookup interval (1 s).
    expect(clock.sleeps).toEqual([5000, 1000, 10_000, 1000, 30_000, 1000, 30_000, 1000]);
    expect(fake.lookups.map((r) => r.status)).toEqual([409, 409, 409, 409, 200]);
  });

  it('backs off U(interval, min(60, 2^(n-1))) s and gives up after the lookup timeout', async () => {
    const fake = await FakeConductor.start({ nodes: [] });
    cleanups.push(() => fake.close());
    const { run, clock } = lookupWith([fake.url], { timeoutS: 600 });
    const err = await run.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(LookupNodeError);
    expect((err as Error).message).toMatch(/; last: HTTP 404: Resource could not be found\.$/);
    expect(clock.now()).toBeGreaterThanOrEqual(600_000);
    clock.sleeps.slice(0, -1).forEach((ms, i) => {
      expect(ms).toBeGreaterThanOrEqual(1000);
      expect(ms).toBeLessThanOrEqual(Math.max(1, Math.min(60, 2 ** i)) * 1000);
    });
    expect(fake.lookups.length).toBe(clock.sleeps.length + 1);
  });

  it('stops at the timeout, making one attempt only with a timeout of 0', async () => {
    const fake = await FakeConductor.start({ nodes: [] });
    cleanups.push(() => fake.close());
    const { run } = lookupWith([fake.url], { timeoutS: 0 });
    await expect(run).rejects.toThrow(/after 1 attempt\(s\) in 0 s/);
    expect(fake.lookups).toHaveLength(1);
  });

  it('names the connection error when no conductor answers', async () => {
    const srv = createServer();
    await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
    const url = `http://127.0.0.1:${(srv.address() as { port: number }).port}`;
    await new Promise<void>((r) => srv.close(() => r()));
    const { run } = lookupWith([url], { timeoutS: 30 });
    await expect(run).rejects.toThrow(/last: no answer from http:\/\/127\.0\.0\.1:\d+: ECONNREFUSED/);
  });

  it('retries "******" while it holds no token; adopts it with a pre-generated one', async () => {
    const fake = await conductor();
    const node = [...fake.nodes.values()][0]!;
    node.internal.agent_secret_token = 'x'.repeat(43);
    const held = lookupWith([fake.url], { heldToken: 'k'.repeat(40) });
    expect((await held.run).token).toBe('k'.repeat(40));
    const none = lookupWith([fake.url], { timeoutS: 5 });
    await expect(none.run).rejects.toThrow(/already handed out this node's token \("\*\*\*\*\*\*"\)/);
  });

  it('sends every MAC, the capped version header and node_uuid when known', async () => {
    const fake = await conductor();
    const node = [...fake.nodes.values()][0]!;
    const { run } = lookupWith([fake.url], { macs: ['aa:bb:cc:dd:ee:ff', MAC], nodeUuid: node.uuid, versions: at(82) });
    await run;
    const req = fake.lookups[0]!;
    expect(req.query).toEqual({ addresses: `aa:bb:cc:dd:ee:ff,${MAC}`, node_uuid: node.uuid });
    expect(req.headers['x-openstack-ironic-api-version']).toBe('1.62');
    expect(req.headers['x-openstack-request-id']).toBe('req-0b5e1d0c-6b1f-4a4e-9c59-3f0e8f4f2b7a');
    expect(req.headers['content-type']).toBe('application/json');
    const old = lookupWith([fake.url], { versions: at(40), heldToken: null });
    expect((await old.run).token).toBeNull();
    expect(fake.lookups[1]!.headers['x-openstack-ironic-api-version']).toBe('1.40');
  });
});
