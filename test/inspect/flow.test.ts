// The inspection flow: the real agent process with only a callback URL (posts, then keeps serving), the
// POST's retries on virtual time, collector failures reported IPA's way, and the fast-track path where the
// ≥ 1.84 callback reply carries the agent token that a later lookup only shows as "******".
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { createServer, type IncomingHttpHeaders, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { cpus, tmpdir } from 'node:os';
import { join } from 'node:path';
import { gunzipSync } from 'node:zlib';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgent } from '../../agent/agent.ts';
import { buildConfig } from '../../agent/config/config.ts';
import { ConductorLink } from '../../agent/conductor/link.ts';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { collectors } from '../../agent/inspect/collectors/registry.ts';
import { inspect, inspectUntilAnswered } from '../../agent/inspect/flow.ts';
import { memTotalBytes } from '../../agent/inspect/memory.ts';
import { LogRing, nullLogger } from '../../agent/log.ts';
import { AgentState } from '../../agent/state.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { installFakes } from '../helpers/fake-tools.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';

interface Posted {
  headers: IncomingHttpHeaders;
  body: Record<string, unknown>;
}

/** A stand-in for Ironic's /v1/continue_inspection: records posts, answers from a script. */
async function callbackServer(
  answer: (n: number, p: Posted) => Promise<{ status: number; body: unknown }> | { status: number; body: unknown },
) {
  const posts: Posted[] = [];
  const server: Server = createServer(async (req, res) => {
    let raw = '';
    for await (const c of req) raw += c;
    const p = { headers: req.headers, body: JSON.parse(raw) as Record<string, unknown> };
    posts.push(p);
    const a = await answer(posts.length, p);
    res.writeHead(a.status, { 'content-type': 'application/json' }).end(JSON.stringify(a.body));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const url = `http://127.0.0.1:${(server.address() as AddressInfo).port}/v1/continue_inspection`;
  cleanups.push(() => new Promise((r) => server.close(() => r())));
  return { url, posts };
}

const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

function configFor(flags: Record<string, string>) {
  return buildConfig(
    new Map(),
    new Map(
      Object.entries({
        'ipa-listen-host': '127.0.0.1',
        'ipa-listen-port': '0',
        'ipa-nic-wait-timeout': '0',
        'device-allowlist': '/dev/null',
        ...flags,
      }),
    ),
  );
}

function inProcess(flags: Record<string, string>, extra: Partial<Parameters<typeof inspect>[0]> = {}) {
  const config = configFor(flags);
  const state = new AgentState('test', null);
  const clock = new VirtualClock({ start: 0 });
  return {
    state,
    clock,
    run: () => inspect({ config, log: nullLogger, logRing: new LogRing(), state, clock, ...extra }),
  };
}

const macs = await nicMacs();

describe('the agent process with only ipa-inspection-callback-url', () => {
  it('posts the inventory with IPA\'s body and headers, then keeps serving (no "no conductor" exit)', async () => {
    const cb = await callbackServer(() => ({ status: 202, body: { uuid: '1be26c0b-03f2-4d2e-ae87-c02d7f33c123' } }));
    const dir = await mkdtemp(join(tmpdir(), 'ina-inspect-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    await writeFile(
      join(dir, 'cmdline'),
      `BOOT_IMAGE=/vmlinuz ipa-inspection-callback-url=${cb.url} BOOTIF=01-52-54-00-12-34-56\n`,
    );
    const status = join(dir, 'status.json');
    const child = spawn(
      process.execPath,
      [
        '--import',
        'tsx',
        'agent/main.ts',
        `--kernel-cmdline=${join(dir, 'cmdline')}`,
        '--ipa-listen-host=127.0.0.1',
        '--ipa-listen-port=0',
        '--ipa-nic-wait-timeout=0',
        '--ipa-inspection-dhcp-wait-timeout=0',
        '--device-allowlist=/dev/null',
        `--status-file=${status}`,
      ],
      { stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let out = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (out += c));
    cleanups.push(async () => void child.kill('SIGKILL'));
    const deadline = Date.now() + 60_000;
    while (!/agent API listening/.test(out)) {
      if (child.exitCode !== null || Date.now() > deadline) throw new Error(`agent did not come up:\n${out}`);
      await new Promise((r) => setTimeout(r, 200));
    }
    expect(child.exitCode).toBeNull();
    expect(cb.posts).toHaveLength(1);
    const { headers, body } = cb.posts[0]!;
    expect(headers['content-type']).toBe('application/json');
    expect(headers.accept).toBe('application/json');
    expect(headers['x-openstack-ironic-api-version']).toBeUndefined();
    expect(Object.keys(body).sort()).toEqual(
      [
        'boot_interface',
        'configuration',
        'error',
        'inventory',
        'logs',
        ...('root_disk' in body ? ['root_disk'] : []),
      ].sort(),
    );
    expect(body.error).toBeNull();
    expect(body.boot_interface).toBe('01-52-54-00-12-34-56');
    expect(body.configuration).toEqual({
      collectors: ['default', 'logs'],
      managers: [{ name: 'generic_hardware_manager', version: '1.2' }],
    });
    const inv = body.inventory as {
      cpu: { count: number };
      memory: { total: number };
      interfaces: { mac_address: string }[];
      boot: unknown;
    };
    expect(inv.cpu.count).toBe(cpus().length);
    expect(inv.memory.total).toBe(memTotalBytes(await readFile('/proc/meminfo', 'utf8')));
    expect(inv.interfaces.map((i) => i.mac_address)).toEqual(macs);
    expect(inv.boot).toEqual({ current_boot_mode: 'bios', pxe_interface: '01-52-54-00-12-34-56' });
    // logs: a gzipped tar, base64
    expect(
      gunzipSync(Buffer.from(body.logs as string, 'base64'))
        .subarray(257, 262)
        .toString(),
    ).toBe('ustar');
    // its agent.log is the agent's own recent log: the ring main.ts's logger writes reaches the collector
    await writeFile(join(dir, 'logs.tar.gz'), Buffer.from(body.logs as string, 'base64'));
    const agentLog = execFileSync('tar', ['-xzOf', join(dir, 'logs.tar.gz'), './agent.log'], { encoding: 'utf8' });
    expect(agentLog).toMatch(/"msg":"hardware inventory collected"/);
    // the log says how long the inventory took; the status file (the console) shows the summary and result
    expect(out).toMatch(/"collectionMs":\d+/);
    await new Promise((r) => setTimeout(r, 400));
    const doc = JSON.parse(await readFile(status, 'utf8'));
    expect(doc.status.inspection).toMatchObject({
      phase: 'done',
      result: 'HTTP 202, node 1be26c0b-03f2-4d2e-ae87-c02d7f33c123',
    });
    expect(doc.status.inspection.summary).toMatch(new RegExp(`^${cpus().length} CPU x86_64, \\d+ MiB, `));
    expect(doc.status.phase).toBe('inspected; waiting to be powered off');
  }, 90_000);
});

describe('posting', () => {
  it('retries 503 and 409 after 5 s each, then takes the node UUID', async () => {
    const cb = await callbackServer((n) =>
      n === 1
        ? { status: 503, body: {} }
        : n === 2
          ? { status: 409, body: {} }
          : { status: 202, body: { uuid: 'u-1' } },
    );
    const t = inProcess({
      'ipa-inspection-callback-url': cb.url,
      'ipa-inspection-collectors': 'default',
      'ipa-api-url': 'http://127.0.0.1:1',
    });
    const r = await t.run();
    expect(r.outcome).toMatchObject({ kind: 'accepted', attempts: 3 });
    expect(r.nodeUuid).toBe('u-1');
    expect(t.clock.sleeps).toEqual([5000, 5000]);
    expect(t.state.status.inspection).toMatchObject({ phase: 'done' });
    expect(typeof t.state.status.inspection?.collectionMs).toBe('number');
  });

  it('gives up within ipa-inspection-timeout and on a 4xx at once; neither throws', async () => {
    const down = await callbackServer(() => ({ status: 500, body: {} }));
    const t = inProcess({
      'ipa-inspection-callback-url': down.url,
      'ipa-inspection-collectors': 'default',
      'ipa-inspection-timeout': '12',
    });
    expect((await t.run()).outcome).toMatchObject({ kind: 'failed', attempts: 3 });
    expect(t.state.status.inspection?.phase).toBe('failed');
    expect(t.clock.sleeps).toEqual([5000, 5000]);
    const bad = await callbackServer(() => ({
      status: 400,
      body: { error_message: JSON.stringify({ faultstring: 'No lookup information provided' }) },
    }));
    const r = await inProcess({ 'ipa-inspection-callback-url': bad.url, 'ipa-inspection-collectors': 'default' }).run();
    expect(r.outcome).toMatchObject({
      kind: 'refused',
      status: 400,
      reason: 'HTTP 400: No lookup information provided',
      attempts: 1,
    });
    expect(r.nodeUuid).toBeUndefined();
  });

  it("keeps IPA's backoff past five attempts while ipa-inspection-timeout allows (5, 5, 6, 12, 24, then 30 s)", async () => {
    const down = await callbackServer(() => ({ status: 503, body: {} }));
    const t = inProcess({
      'ipa-inspection-callback-url': down.url,
      'ipa-inspection-collectors': 'default',
      'ipa-inspection-timeout': '90',
    });
    expect((await t.run()).outcome).toMatchObject({ kind: 'failed', attempts: 7 });
    expect(t.clock.sleeps).toEqual([5000, 5000, 6000, 12000, 24000, 30000]);
    expect(down.posts).toHaveLength(7);
  });

  it('inspects again after a round that reached no callback URL, as IPA restarts, until one answers', async () => {
    const cb = await callbackServer((n) =>
      n <= 4 ? { status: 503, body: {} } : { status: 202, body: { uuid: 'u-9' } },
    );
    const config = configFor({
      'ipa-inspection-callback-url': cb.url,
      'ipa-inspection-collectors': 'default',
      'ipa-inspection-timeout': '12',
    });
    const state = new AgentState('test', null);
    const clock = new VirtualClock({ start: 0 });
    const r = await inspectUntilAnswered({ config, log: nullLogger, logRing: new LogRing(), state, clock });
    expect(r.outcome).toMatchObject({ kind: 'accepted', attempts: 2 });
    expect(r.nodeUuid).toBe('u-9');
    // Round one: three attempts within 12 s; a pause; round two: the second attempt is answered.
    expect(clock.sleeps).toEqual([5000, 5000, 30000, 5000]);
    expect(cb.posts).toHaveLength(5);
    expect(state.status.inspection?.phase).toBe('done');
  });

  it('tries the next callback URL when one does not answer', async () => {
    const cb = await callbackServer(() => ({ status: 202, body: { uuid: 'u-2' } }));
    const r = await inProcess({
      'ipa-inspection-callback-url': `http://127.0.0.1:1/v1/continue_inspection,${cb.url}`,
      'ipa-inspection-collectors': 'default',
    }).run();
    expect(r.nodeUuid).toBe('u-2');
  });
});

describe('collectors', () => {
  it('a failing collector is reported in `error`, the others still run, and no UUID is used', async () => {
    const cb = await callbackServer(() => ({ status: 202, body: { uuid: 'u-3' } }));
    const table = { ...collectors, boom: async () => Promise.reject(new Error('disk on fire')) };
    const r = await inProcess(
      { 'ipa-inspection-callback-url': cb.url, 'ipa-inspection-collectors': 'boom,default,pci-devices,numa-topology' },
      { collectors: table },
    ).run();
    const body = cb.posts[0]!.body;
    expect(body.error).toBe('The following errors were encountered:\n* collector boom failed: disk on fire');
    expect(body.inventory).toBeDefined();
    expect(Array.isArray(body.pci_devices)).toBe(true);
    expect(body.numa_topology).toMatchObject({ ram: [{ numa_node: 0 }] });
    expect(r.nodeUuid).toBeUndefined();
  });

  it('an unknown collector posts only the error, as IPA does', async () => {
    const cb = await callbackServer(() => ({ status: 400, body: {} }));
    await inProcess({ 'ipa-inspection-callback-url': cb.url, 'ipa-inspection-collectors': 'default,nope' }).run();
    expect(Object.keys(cb.posts[0]!.body)).toEqual(['error']);
    expect(cb.posts[0]!.body.error).toMatch(/Failed to load collector nope/);
  });

  it('extra-hardware is a known collector: its failure is reported, and the inventory and the others are still posted', async () => {
    const cb = await callbackServer(() => ({ status: 202, body: { uuid: 'u-4' } }));
    const r = await inProcess({
      'ipa-inspection-callback-url': cb.url,
      'ipa-inspection-collectors': 'default,extra-hardware,pci-devices',
    }).run();
    const body = cb.posts[0]!.body;
    expect(body.error).toBe(
      'The following errors were encountered:\n* collector extra-hardware failed: hardware-detect (python-hardware) is not part of this agent; drop extra-hardware from ipa-inspection-collectors',
    );
    expect(body.inventory).toHaveProperty('cpu.count', cpus().length);
    expect(Array.isArray(body.pci_devices)).toBe(true);
    expect(r.nodeUuid).toBeUndefined();
  });

  it('lldp: NICs that cannot be listened to cost their frames (lldp null), not the inspection, as in IPA', async () => {
    // The helper's answer when it may not open packet sockets (not root): an error line per NIC.
    const fakes = await installFakes({
      'lldp-listen':
        "for (const n of args.slice(1)) process.stdout.write(n + ' error socket: Operation not permitted\\n');",
    });
    cleanups.push(() => fakes.close());
    const cb = await callbackServer(() => ({ status: 202, body: { uuid: 'u-5' } }));
    const r = await inProcess(
      {
        'ipa-inspection-callback-url': cb.url,
        'ipa-inspection-collectors': 'default,lldp',
        'ipa-collect-lldp': '1',
        'ipa-lldp-timeout': '7',
      },
      { lldpCommand: [join(fakes.dir, 'lldp-listen')] },
    ).run();
    const body = cb.posts[0]!.body;
    expect(body.error).toBeNull();
    expect(body.lldp_raw).toEqual({});
    const nics = (body.inventory as { interfaces: { name: string; lldp: unknown }[] }).interfaces;
    expect(nics.map((n) => n.lldp)).toEqual(nics.map(() => null));
    // Listened twice, each time on every NIC at once, for ipa-lldp-timeout: for the inventory
    // (ipa-collect-lldp) and for the lldp collector.
    const calls = await fakes.calls('lldp-listen');
    expect(calls).toHaveLength(2);
    for (const c of calls) expect(c).toEqual(['7000', ...nics.map((n) => n.name)]);
    expect(r.nodeUuid).toBe('u-5');
  });

  const hasDmi = existsSync('/sys/firmware/dmi/tables/DMI');
  it.skipIf(!existsTool('dmidecode'))(
    `dmi-decode ${hasDmi ? 'decodes this host’s SMBIOS tables' : 'fails cleanly on this host, which has no DMI tables'}`,
    async () => {
      const cb = await callbackServer(() => ({ status: 202, body: {} }));
      await inProcess({ 'ipa-inspection-callback-url': cb.url, 'ipa-inspection-collectors': 'dmi-decode' }).run();
      const body = cb.posts[0]!.body;
      if (hasDmi) {
        expect(body.error).toBeNull();
        expect(body.dmi).toHaveProperty('bios');
      } else {
        expect(body.error).toMatch(/collector dmi-decode failed: dmidecode .* failed/);
        expect(body.dmi).toBeUndefined();
      }
    },
  );
});

function existsTool(name: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${name}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

describe.skipIf(macs.length === 0)('fast track: inspection, then lookup and heartbeat without a reboot', () => {
  async function run(maxVersion: string, collectors = 'default') {
    const fake = await FakeConductor.start({ maxVersion, requireTls: false, nodes: [{ macs }] });
    cleanups.push(() => fake.close());
    const node = [...fake.nodes.values()][0]!;
    // Ironic ≥ 1.84 creates the token while answering the callback: taken here through lookup, so the
    // agent's own lookup afterwards sees only "******".
    const cb = await callbackServer(async (_n, p) => {
      if (p.headers['x-openstack-ironic-api-version'] === undefined) return { status: 202, body: { uuid: node.uuid } };
      const res = await fetch(`${fake.url}/v1/lookup?node_uuid=${node.uuid}`, {
        headers: { 'X-OpenStack-Ironic-API-Version': '1.84' },
      });
      return { status: 202, body: await res.json() };
    });
    const config = configFor({
      'ipa-api-url': fake.url,
      'ipa-inspection-callback-url': cb.url,
      'ipa-inspection-collectors': collectors,
      'ipa-lookup-interval': '0.05',
      'ipa-enable-auto-tls': 'false',
    });
    const agent = createAgent(config, nullLogger);
    const link = new ConductorLink(agent, config, nullLogger, { random: () => 0 });
    cleanups.push(() => link.stop());
    await link.start();
    await fake.waitFor(() => node.internal.agent_url !== undefined, 'the first heartbeat');
    return { fake, node, cb, agent };
  }

  it('≥ 1.84: asks with 1.84, keeps the token from the reply, and heartbeats with it', async () => {
    const { fake, node, cb, agent } = await run('1.115');
    expect(cb.posts[0]!.headers['x-openstack-ironic-api-version']).toBe('1.84');
    const agentLookup = fake.lookups.at(-1)!;
    expect(agentLookup.query.node_uuid).toBe(node.uuid);
    expect(agentLookup.query.addresses).toBe(macs.join(','));
    expect(agent.services.state.agentToken).toBe(node.internal.agent_secret_token);
    expect(fake.heartbeats.every((h) => h.status === 202)).toBe(true);
  });

  it('≥ 1.84 with a collector failed: the token of the reply is kept, the UUID is not used (as IPA)', async () => {
    const { fake, node, cb, agent } = await run('1.115', 'default,extra-hardware');
    expect(cb.posts[0]!.body.error).toMatch(/collector extra-hardware failed/);
    expect(fake.lookups.at(-1)!.query.node_uuid).toBeUndefined();
    expect(agent.services.state.agentToken).toBe(node.internal.agent_secret_token);
    expect(fake.heartbeats.every((h) => h.status === 202)).toBe(true);
  });

  it('below 1.84: no version header, the UUID narrows the lookup, which hands out the token', async () => {
    const { fake, node, cb, agent } = await run('1.82');
    expect(cb.posts[0]!.headers['x-openstack-ironic-api-version']).toBeUndefined();
    expect(fake.lookups).toHaveLength(1);
    expect(fake.lookups[0]!.query.node_uuid).toBe(node.uuid);
    expect(agent.services.state.agentToken).toBe(node.internal.agent_secret_token);
  });
});
