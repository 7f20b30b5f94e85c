// The conductor link end to end on loopback: the agent in-process, the fake conductor on a real port.
import { createServer } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgent, type Agent } from '../../agent/agent.ts';
import { system } from '../../agent/commands/extensions/system.ts';
import { command, type Extension } from '../../agent/commands/types.ts';
import { ConductorLink } from '../../agent/conductor/link.ts';
import { nullLogger } from '../../agent/log.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { FakeConductor, type FakeConductorOptions } from '../helpers/fake-conductor.ts';
import { linkedConfig } from '../helpers/linked-config.ts';

// The NIC list is handed to the link, so these run on any host, with or without a physical NIC.
const macs = ['52:54:00:12:34:56'];
const nics = async () => macs;

/** A test extension whose async command ends when the test says so. */
let release: () => void = () => {};
const testExt: Extension = {
  wait: command({
    mode: 'async',
    parse: () => ({}),
    run: () => new Promise<string>((resolve) => (release = () => resolve('done'))),
  }),
};

interface Linked {
  agent: Agent;
  link: ConductorLink;
  fatal: Error[];
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function conductor(opts: FakeConductorOptions = {}): Promise<FakeConductor> {
  const fake = await FakeConductor.start(opts);
  cleanups.push(() => fake.close());
  return fake;
}

function linked(apiUrl: string, flags: Record<string, string> = {}): Linked {
  const config = linkedConfig(apiUrl, {
    'ipa-lookup-interval': '0.05',
    'ipa-lookup-timeout': '20',
    'ipa-http-request-timeout': '2',
    'simulated-reboot-delay': '0.05',
    ...flags,
  });
  const agent = createAgent(config, nullLogger, { registry: { test: testExt, system } });
  const fatal: Error[] = [];
  const link = new ConductorLink(agent, config, nullLogger, { random: () => 0, onFatal: (e) => fatal.push(e), nics });
  cleanups.push(() => link.stop());
  return { agent, link, fatal };
}

async function deadUrl(): Promise<string> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return `http://127.0.0.1:${port}`;
}

/** Starts the link, waits for its first heartbeat, and runs one async command to the end, as the conductor. */
async function linkAndRunOneCommand(fake: FakeConductor, link: ConductorLink, uuid: string) {
  await link.start();
  await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
  const client = fake.clientFor(uuid);
  cleanups.push(() => client.close());
  await client.command('test.wait', {});
  release();
  return client;
}

describe('conductor link', () => {
  it('looks up with IPA headers and heartbeats over HTTPS with the CA it sends', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    const [node] = [...fake.nodes.values()];
    const { agent, link } = linked(fake.url);
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');

    const lookup = fake.lookups[0]!;
    expect(lookup.query.addresses!.split(',')).toEqual(macs);
    expect(lookup.headers['x-openstack-ironic-api-version']).toBe('1.62');
    expect(lookup.headers.accept).toBe('application/json');
    expect(fake.requests[0]!.path).toBe('/');

    const hb = fake.heartbeats[0]!;
    expect(hb.status).toBe(202);
    expect(hb.headers['x-openstack-ironic-api-version']).toBe('1.68');
    const body = hb.body as {
      callback_url: string;
      agent_token: string;
      agent_version: string;
      agent_verify_ca: string;
    };
    expect(Object.keys(body)).toEqual(['callback_url', 'agent_token', 'agent_version', 'agent_verify_ca']);
    expect(body.callback_url).toBe(`https://127.0.0.1:${link.server!.port}`);
    expect(body.agent_token).toBe(node!.internal.agent_secret_token);
    expect(body.agent_token).toHaveLength(43);
    expect(body.agent_version).toBe(agent.services.state.status.version);
    expect(body.agent_verify_ca).toMatch(/^-----BEGIN CERTIFICATE-----/);
    // The fake records the heartbeat as it answers; the agent notes the answer a moment later.
    await expect.poll(() => agent.services.state.status.lastHeartbeat).toMatchObject({ ok: true, status: '202' });
    expect(agent.services.state.status).toMatchObject({
      node: { uuid: node!.uuid },
      callbackUrl: body.callback_url,
      conductorUrl: fake.url,
      phase: 'heartbeating',
    });

    const client = fake.clientFor(node!.uuid);
    cleanups.push(() => client.close());
    expect(await client.commands()).toEqual([]);
    const stranger = new AgentClient({ url: body.callback_url, token: body.agent_token });
    cleanups.push(() => stranger.close());
    await expect(stranger.commands()).rejects.toThrow(/self-signed|certificate/i);
  });

  it('asks the API version again when discovery failed at first: looks up at 1.62, heartbeats at 1.68 over HTTPS', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    fake.queueRoot(503);
    const { link } = linked(fake.url);
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    expect(fake.requests.filter((r) => r.path === '/').map((r) => r.status)).toEqual([503, 200]);
    expect(fake.lookups[0]!.headers['x-openstack-ironic-api-version']).toBe('1.62');
    const hb = fake.heartbeats[0]!;
    expect(hb.headers['x-openstack-ironic-api-version']).toBe('1.68');
    expect(hb.status).toBe(202);
    const body = hb.body as { callback_url: string };
    expect(Object.keys(body)).toEqual(['callback_url', 'agent_token', 'agent_version', 'agent_verify_ca']);
    expect(body.callback_url).toMatch(/^https:\/\//);
  });

  it('over IPv6: the callback host goes in brackets and the certificate names the IPv6 address', async (ctx) => {
    const fake = await FakeConductor.start({ nodes: [{ macs }], host: '::1' }).catch(() => undefined);
    if (!fake) return ctx.skip('no IPv6 loopback (::1) on this machine');
    cleanups.push(() => fake.close());
    const node = [...fake.nodes.values()][0]!;
    const { link } = linked(fake.url, { 'ipa-listen-host': '::1' });
    await link.start();
    await fake.waitFor(() => node.internal.agent_url !== undefined, 'a heartbeat');
    expect(node.internal.agent_url).toBe(`https://[::1]:${link.server!.port}`);
    const client = fake.clientFor(node.uuid);
    cleanups.push(() => client.close());
    expect(await client.commands()).toEqual([]);
  });

  it('refuses mdns discovery with a clear reason', async () => {
    const { link } = linked('mdns');
    await expect(link.start()).rejects.toThrow(/mDNS is not supported/);
  });

  it('rotates past a conductor URL that is down and keeps the working one first', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    const dead = await deadUrl();
    const { link, agent } = linked(`${dead},${fake.url}`);
    await link.start();
    expect(link.api.current).toBe(fake.url);
    expect(agent.services.state.status.conductorUrl).toBe(fake.url);
  });

  it('retries while the conductor resets connections, then looks up once it answers', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    fake.mode = 'reset';
    const { link } = linked(fake.url);
    const started = link.start();
    setTimeout(() => (fake.mode = 'normal'), 300);
    await started;
    expect(fake.lookups.filter((r) => r.status === 200)).toHaveLength(1);
  });

  it('retries a 404 (node not in a lookup state) until the node becomes lookup-able', async () => {
    const fake = await conductor({ nodes: [{ macs, lookupAllowed: false }] });
    const [node] = [...fake.nodes.values()];
    const { link } = linked(fake.url);
    const started = link.start();
    await fake.waitFor(() => fake.lookups.length >= 2, 'two refused lookups');
    node!.lookupAllowed = true;
    await started;
    expect(fake.lookups.map((r) => r.status).slice(0, 2)).toEqual([404, 404]);
    expect(fake.lookups.at(-1)!.status).toBe(200);
  });

  it('fails with a one-line reason when lookup never succeeds', async () => {
    const fake = await conductor({ nodes: [] });
    const { link } = linked(fake.url, { 'ipa-lookup-timeout': '0.3' });
    await expect(link.start()).rejects.toThrow(
      /^Could not look up node info after \d+ attempt\(s\) in 0.3 s; last: HTTP 404: Resource could not be found\.$/,
    );
    expect(link.server).toBeUndefined();
  });

  it('keeps a pre-generated token when lookup answers "******"', async () => {
    const token = 'p'.repeat(43);
    const fake = await conductor({ nodes: [{ macs, pregeneratedToken: token }] });
    const { link, agent } = linked(fake.url, { 'ipa-agent-token': token });
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    expect(agent.services.state.agentToken).toBe(token);
    expect(fake.heartbeats[0]!.status).toBe(202);
  });

  it('retries a "******" token it cannot use until the conductor wipes the old one', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    const [node] = [...fake.nodes.values()];
    node!.internal.agent_secret_token = 'an-old-boot'.padEnd(43, 'x');
    const { link, agent } = linked(fake.url);
    const started = link.start();
    await fake.waitFor(() => fake.lookups.length >= 2, 'two lookups');
    fake.powerAction(node!.uuid);
    await started;
    expect(agent.services.state.agentToken).toBe(node!.internal.agent_secret_token);
    expect(agent.services.state.agentToken).not.toMatch(/^an-old-boot/);
  });

  it.each([
    ['1.115', 'from the first request', false],
    ['1.96', 'from the first request', false],
    ['1.95', 'only after a GET carried it', true],
    ['1.82', 'only after a GET carried it', true],
  ])('a %s conductor: the token is required on GET %s', async (maxVersion, _how, openFirst) => {
    const fake = await conductor({ nodes: [{ macs }], maxVersion });
    const node = [...fake.nodes.values()][0]!;
    const { link } = linked(fake.url);
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    const bare = fake.clientFor(node.uuid, { tokenOnGet: false });
    const tokened = fake.clientFor(node.uuid);
    cleanups.push(
      () => bare.close(),
      () => tokened.close(),
    );
    if (openFirst) {
      expect(await bare.commands()).toEqual([]);
      expect(await tokened.commands()).toEqual([]);
    }
    await expect(bare.commands()).rejects.toThrow(/401/);
    expect(await tokened.commands()).toEqual([]);
  });

  it('system.lockdown: the reply arrives, then the API and the heartbeat stop for good and no new boot starts', async () => {
    const fake = await conductor({ nodes: [{ macs }], heartbeatTimeout: 1 });
    const node = [...fake.nodes.values()][0]!;
    const { agent, link } = linked(fake.url);
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    const client = fake.clientFor(node.uuid);
    cleanups.push(() => client.close());
    expect(await client.command('system.lockdown', {})).toMatchObject({
      command_status: 'SUCCEEDED',
      command_result: null,
    });
    await expect.poll(() => agent.services.state.status.phase, { timeout: 5000 }).toBe('locked down');
    await expect(client.commands()).rejects.toThrow(/ECONNREFUSED|Connection to agent failed/);
    const seen = fake.heartbeats.length;
    const lookups = fake.lookups.length;
    await new Promise((r) => setTimeout(r, 1500));
    expect(fake.heartbeats.length).toBe(seen);
    expect(fake.lookups.length).toBe(lookups);
  });

  it('serves plain HTTP and omits agent_verify_ca below 1.68', async () => {
    const fake = await conductor({ nodes: [{ macs }], maxVersion: '1.67', requireTls: false });
    const { link } = linked(fake.url);
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    const hb = fake.heartbeats[0]!;
    expect(hb.headers['x-openstack-ironic-api-version']).toBe('1.67');
    expect(Object.keys(hb.body as object)).toEqual(['callback_url', 'agent_token', 'agent_version']);
    expect((hb.body as { callback_url: string }).callback_url).toMatch(/^http:\/\/127\.0\.0\.1:\d+$/);
  });

  it('starts over when the conductor wipes the token: new lookup, empty history, same callback', async () => {
    const fake = await conductor({ nodes: [{ macs }], heartbeatTimeout: 1 });
    const [node] = [...fake.nodes.values()];
    const { link, agent } = linked(fake.url);
    const client = await linkAndRunOneCommand(fake, link, node!.uuid);
    await fake.waitFor(() => fake.heartbeats.length >= 2, 'a second heartbeat');
    expect(await client.commands()).toHaveLength(1);
    const firstToken = node!.internal.agent_secret_token;
    const callback = node!.internal.agent_url;
    const ca = node!.internal.agent_verify_ca;

    fake.powerAction(node!.uuid);
    await fake.waitFor(
      () => fake.heartbeats.some((h) => h.fault?.startsWith('Invalid or missing agent token')),
      'a refused heartbeat',
    );
    await fake.waitFor(() => node!.internal.agent_url !== undefined, 'a heartbeat after the new lookup');
    expect(fake.lookups.length).toBe(2);
    expect(node!.internal.agent_secret_token).not.toBe(firstToken);
    expect(node!.internal.agent_url).toBe(callback);
    expect(node!.internal.agent_verify_ca).toBe(ca);
    expect(agent.services.state.agentToken).toBe(node!.internal.agent_secret_token);
    const fresh = fake.clientFor(node!.uuid);
    cleanups.push(() => fresh.close());
    expect(await fresh.commands()).toEqual([]);
  });

  it('boots again after a simulated power-off: new lookup, token, certificate and API, empty history and RAID memory', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    const [node] = [...fake.nodes.values()];
    const { link, agent, fatal } = linked(fake.url);
    await linkAndRunOneCommand(fake, link, node!.uuid);
    const before = { ...node!.internal, port: link.server!.port };
    const oldServer = link.server!;
    agent.services.state.raidRootVolumes = new Map([['/dev/md0', true]]);

    // What a conductor does around standby.power_off: it wipes the token, the agent powers off.
    fake.powerAction(node!.uuid);
    const rootCount = fake.requests.filter((r) => r.path === '/').length;
    agent.services.host.emit('simulated-restart', 'poweroff');
    await fake.waitFor(
      () => node!.internal.agent_url !== undefined && fake.lookups.length === 2,
      'a heartbeat after reboot',
    );
    expect(fatal).toEqual([]);
    expect(fake.requests.filter((r) => r.path === '/').length).toBe(rootCount + 1);
    expect(link.server).not.toBe(oldServer);
    expect(node!.internal.agent_secret_token).not.toBe(before.agent_secret_token);
    expect(node!.internal.agent_verify_ca).not.toBe(before.agent_verify_ca);
    const fresh = fake.clientFor(node!.uuid);
    cleanups.push(() => fresh.close());
    expect(await fresh.commands()).toEqual([]);
    expect(agent.executor.list()).toEqual([]);
    expect(agent.services.state.raidRootVolumes.size).toBe(0);
  });

  it('a power cycle during a lookup supersedes it instead of failing', async () => {
    const fake = await conductor({ nodes: [{ macs }], heartbeatTimeout: 1 });
    const [node] = [...fake.nodes.values()];
    const { link, agent, fatal } = linked(fake.url, { 'ipa-lookup-timeout': '60' });
    await link.start();
    await fake.waitFor(() => fake.heartbeats.length >= 1, 'a heartbeat');
    // The next heartbeat is refused, and the re-lookup it starts keeps getting 404.
    fake.powerAction(node!.uuid);
    node!.lookupAllowed = false;
    await fake.waitFor(() => fake.lookups.filter((r) => r.status === 404).length >= 2, 'refused re-lookups');
    agent.services.host.emit('simulated-restart', 'reboot');
    await fake.waitFor(() => fake.requests.filter((r) => r.path === '/').length === 2, 'the second boot');
    node!.lookupAllowed = true;
    await fake.waitFor(() => node!.internal.agent_url !== undefined, 'a heartbeat after the reboot');
    expect(fatal).toEqual([]);
    expect(fake.requests.filter((r) => r.path === '/')).toHaveLength(2);
  });

  it('reports a fatal error when the lookup after a power cycle times out', async () => {
    const fake = await conductor({ nodes: [{ macs }] });
    const [node] = [...fake.nodes.values()];
    const { link, agent, fatal } = linked(fake.url, { 'ipa-lookup-timeout': '0.3' });
    await link.start();
    node!.lookupAllowed = false;
    agent.services.host.emit('simulated-restart', 'reboot');
    await expect.poll(() => fatal.length, { timeout: 10_000 }).toBe(1);
    expect(fatal[0]!.message).toMatch(/^Could not look up node info/);
  });
});
