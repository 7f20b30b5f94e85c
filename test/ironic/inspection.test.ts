// In-band inspection against the newest Ironic (sid, `inspect_interface=agent`, INA_IRONIC=sid): the agent as a
// host process inspects this machine. (a) An enrolled node: manage -> inspect -> manageable, the optional hooks
// set memory_mb, cpus, cpu_arch, local_gb and the boot mode, the stored inventory matches /proc, lsblk and
// ip link, and the agent goes on to heartbeat (fast track) with the token from the 1.84 callback reply.
// (b) Auto-discovery: no node knows this machine; Ironic enrolls one from the inventory (with its port), and
// the same agent, never restarted, cleans and deploys it with fast track.
import { execFileSync } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { attachLoop, detachLoop, GiB, type LoopDevice } from '../helpers/loop.ts';
import { startAgentProcess, type AgentProcess } from './support/agent-process.ts';
import { Baremetal } from './support/baremetal.ts';
import { deploy, expectDeployed } from './support/deploy.ts';
import { startImageServer, type ImageServer } from './support/image-server.ts';
import { buildRawImage } from './support/images.ts';
import { ironicKind, startIronic, type RunningIronic } from './support/ironic.ts';
import { phase } from './support/phase.ts';
import { physicalMacs, type Rig } from './support/rig.ts';
import { waitForState } from './support/wait-state.ts';

const S = 'inspection (sid)';
const sid = ironicKind() === 'sid';
if (!sid)
  console.warn(
    'inspection.test.ts skipped: it needs the newest Ironic (INA_IRONIC=sid); 21.4 has no agent inspect interface',
  );

const EXTRA_CONF = `
[DEFAULT]
default_inspect_interface = agent
[inspector]
hooks = $default_hooks,memory,cpus,root-device,boot-mode
# fake boot cannot boot a ramdisk: Ironic runs unmanaged inspection and the agent is started by the test
require_managed_boot = false
[auto_discovery]
enabled = true
driver = fake-hardware
`;

let ironic: RunningIronic;
let bm: Baremetal;
let dir: string;
let disk: LoopDevice;
let images: ImageServer;
let mac: string;
const agents: AgentProcess[] = [];

async function api<T>(path: string): Promise<T> {
  const res = await fetch(`${ironic.url}${path}`, { headers: { 'X-OpenStack-Ironic-API-Version': ironic.apiVersion } });
  if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

async function startAgent(): Promise<AgentProcess> {
  const agent = await startAgentProcess({
    apiUrl: ironic.url,
    disk: disk.path,
    dir,
    autoTls: ironic.requireTls,
    extraFlags: {
      'ipa-inspection-callback-url': `${ironic.url}/v1/continue_inspection`,
      'ipa-inspection-collectors': 'default,logs,pci-devices,numa-topology',
      'ipa-lookup-interval': '1',
    },
  });
  agents.push(agent);
  return agent;
}

const explain = async () =>
  `--- agent\n${(await agents.at(-1)?.tail(30)) ?? ''}\n--- conductor\n${(await ironic.conductorLog())
    .split('\n')
    .filter((l) => / (ERROR|WARNING) /.test(l))
    .slice(-12)
    .join('\n')}`;

async function heartbeated(uuid: string, timeoutMs = 90_000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const n = await bm.node(uuid);
    if (n.driver_internal_info.agent_url && n.driver_internal_info.agent_last_heartbeat) return n;
    if (Date.now() > deadline) throw new Error(`no heartbeat from the agent\n${await explain()}`);
    await new Promise((r) => setTimeout(r, 1000));
  }
}

beforeAll(async () => {
  if (!sid) return;
  mac = (await physicalMacs())[0]!;
  ironic = await phase(S, 'start sid Ironic', () => startIronic({ extraConf: EXTRA_CONF }));
  bm = new Baremetal(ironic);
  dir = await mkdtemp(join(tmpdir(), 'ina-inspection-'));
  // a sparse 6 GiB loop device: big enough to be the root disk IPA would guess (>= 4 GiB)
  disk = await attachLoop(6 * GiB);
  images = await startImageServer(dir);
}, 300_000);

afterAll(async () => {
  for (const a of agents) await a.stop().catch(() => undefined);
  await images?.close();
  if (disk) await detachLoop(disk);
  await ironic?.stop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

describe.skipIf(!sid)('in-band inspection with Ironic 39 (agent inspect interface)', () => {
  let inspectedUuid: string;

  it('inspects an enrolled node: manageable, properties from the hooks, and the agent heartbeats after', async () => {
    const enroll = join(dir, 'enroll.json');
    await writeFile(
      enroll,
      JSON.stringify({
        nodes: [
          {
            name: 'ina-inspect',
            driver: 'fake-hardware',
            inspect_interface: 'agent',
            properties: { root_device: { name: disk.path } },
            ports: [{ address: mac }],
          },
        ],
      }),
    );
    await bm.run(['create', enroll]);
    inspectedUuid = (await bm.node('ina-inspect')).uuid;
    const uuid = inspectedUuid;
    await bm.run(['node', 'power', 'on', uuid]);
    await phase(S, 'manage', async () => {
      await bm.run(['node', 'manage', uuid]);
      await waitForState(bm, uuid, 'manageable', { explain });
    });
    await bm.run(['node', 'inspect', uuid]);
    for (let i = 0; (await bm.node(uuid)).provision_state !== 'inspect wait'; i++) {
      if (i > 60)
        throw new Error(
          `node never reached "inspect wait"\n${JSON.stringify(await bm.node(uuid))}\n${await explain()}`,
        );
      await new Promise((r) => setTimeout(r, 1000));
    }
    await startAgent();
    const node = await phase(S, 'inspect -> manageable', () =>
      waitForState(bm, uuid, 'manageable', { explain }, 180_000),
    );
    expect(node.last_error).toBeNull();
    const full = await api<{ properties: Record<string, unknown> }>(`/v1/nodes/${uuid}`);
    const inv = (await api<{ inventory: Record<string, any> }>(`/v1/nodes/${uuid}/inventory`)).inventory;
    expect(full.properties).toMatchObject({
      cpu_arch: 'x86_64',
      cpus: inv.cpu.count,
      memory_mb: inv.memory.physical_mb,
      local_gb: Math.floor(disk.sizeBytes / GiB) - 1,
    });
    expect(String(full.properties.capabilities)).toMatch(/boot_mode:bios/);
    const ports = await api<{ ports: { address: string; pxe_enabled: boolean }[] }>(
      `/v1/ports?node=${uuid}&fields=address,pxe_enabled`,
    );
    expect(ports.ports.map((p) => p.address)).toEqual([mac]);

    // The stored inventory against the machine's own view.
    const cpuinfo = await readFile('/proc/cpuinfo', 'utf8');
    expect(inv.cpu.count).toBe(cpuinfo.match(/^processor\s*:/gm)!.length);
    expect(inv.cpu.model_name).toBe(/^model name\s*:\s*(.*)$/m.exec(cpuinfo)![1]);
    expect(inv.memory.total).toBe(
      Number(/^MemTotal:\s+(\d+)/m.exec(await readFile('/proc/meminfo', 'utf8'))![1]) * 1024,
    );
    const lsblk = JSON.parse(execFileSync('lsblk', ['-J', '-b', '-d', '-o', 'KNAME,SIZE,TYPE'], { encoding: 'utf8' }))
      .blockdevices as { kname: string; size: number; type: string }[];
    const lsDisks = lsblk.filter((d) => d.type === 'disk' && d.size > 0).map((d) => [`/dev/${d.kname}`, d.size]);
    const byName = (a: unknown[][]) => [...a].sort((x, y) => String(x[0]).localeCompare(String(y[0])));
    expect(byName(inv.disks.map((d: any) => [d.name, d.size]))).toEqual(
      byName([...lsDisks, [disk.path, disk.sizeBytes]]),
    );
    const links = JSON.parse(execFileSync('ip', ['-j', 'link'], { encoding: 'utf8' })) as {
      ifname: string;
      address: string;
    }[];
    for (const i of inv.interfaces) expect(links.find((l) => l.ifname === i.name)?.address).toBe(i.mac_address);
    expect(inv.interfaces.map((i: any) => i.mac_address)).toContain(mac);

    // Fast track: the agent that inspected goes on to look up and heartbeat, with the token of the 1.84 reply.
    await phase(S, 'heartbeat after inspection', () => heartbeated(uuid));
    const log = await agents[0]!.log();
    expect(log).toMatch(/"msg":"hardware inventory collected"/);
    expect(log).not.toMatch(/already handed out this node's token/);
    expect(await ironic.apiLog()).toMatch(/POST \/v1\/continue_inspection\S* - 202/);
    await agents[0]!.stop();
  });

  it('auto-discovers an unknown machine, then cleans and deploys it with fast track, agent never restarted', async () => {
    await bm.run(['node', 'delete', inspectedUuid]);
    await startAgent();
    const deadline = Date.now() + 120_000;
    let uuid: string | undefined;
    while (!uuid) {
      const nodes = await api<{ nodes: { uuid: string }[] }>('/v1/nodes');
      uuid = nodes.nodes[0]?.uuid;
      if (!uuid && Date.now() > deadline) throw new Error(`no node was auto-enrolled\n${await explain()}`);
      if (!uuid) await new Promise((r) => setTimeout(r, 1000));
    }
    // Ironic answers 202 at once and processes afterwards: the inventory is stored last.
    const inventory = await phase(S, 'auto-enrolled node processed', async () => {
      for (let i = 0; ; i++) {
        const res = await fetch(`${ironic.url}/v1/nodes/${uuid}/inventory`, {
          headers: { 'X-OpenStack-Ironic-API-Version': ironic.apiVersion },
        });
        if (res.status === 200)
          return (await res.json()) as { inventory: Record<string, any>; plugin_data: Record<string, unknown> };
        if (i > 90) throw new Error(`no inventory stored for the auto-enrolled node\n${await explain()}`);
        await new Promise((r) => setTimeout(r, 1000));
      }
    });
    expect(inventory.plugin_data.auto_discovered).toBe(true);
    expect((await api<{ ports: { address: string }[] }>(`/v1/ports?node=${uuid}`)).ports.map((p) => p.address)).toEqual(
      [mac],
    );
    const node = await api<{ provision_state: string; properties: Record<string, unknown>; driver: string }>(
      `/v1/nodes/${uuid}`,
    );
    expect(node).toMatchObject({ provision_state: 'enroll', driver: 'fake-hardware' });
    expect(node.properties.cpu_arch).toBe('x86_64');

    await bm.run(['node', 'set', uuid, '--property', `root_device={"name": "${disk.path}"}`]);
    await bm.run(['node', 'power', 'on', uuid]);
    await heartbeated(uuid, 120_000);
    await phase(S, 'manage', async () => {
      await bm.run(['node', 'manage', uuid]);
      await waitForState(bm, uuid, 'manageable', { explain });
    });
    const rig = {
      bm,
      uuid,
      images,
      disk,
      dir,
      ironic,
      drive: async (verb: string, args: string[], target: string, t?: number) => {
        await bm.run(['node', verb, uuid, ...args]);
        return waitForState(bm, uuid, target, { explain }, t);
      },
    } as unknown as Rig;
    await phase(S, 'provide (clean through the running agent)', () => rig.drive('provide', [], 'available', 240_000));
    const raw = await buildRawImage(dir, 'disk.raw');
    const cd = await phase(S, 'deploy', () => deploy(rig, raw, 'raw', 'sha256', 'autodisc'));
    await expectDeployed(rig, raw, cd);
    expect(agents[1]!.exited()).toBe(false);
  });
});
