// One scenario's world: a real Ironic, an image server, a loop device as the node's only disk, the
// agent as a host process looking itself up by this machine's NIC MAC, and the node enrolled for it.
import { access, mkdtemp, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { inject } from 'vitest';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../../helpers/loop.ts';
import { startAgentProcess, type AgentProcess } from './agent-process.ts';
import { Baremetal, type NodeView } from './baremetal.ts';
import { noteStarted } from './leftovers.ts';
import { startImageServer, type ImageServer } from './image-server.ts';
import { startIronic, type IronicOptions, type RunningIronic } from './ironic.ts';
import { waitForState } from './wait-state.ts';

export const DISK_BYTES = 128 * MiB;

export interface RigOptions {
  ironic?: IronicOptions;
  /** The agent serves HTTPS with its auto-generated certificate (what `[agent]require_tls` needs; default: on
   *  exactly when the conductor requires TLS). */
  autoTls?: boolean;
  agentFlags?: Record<string, string>;
  /** Node fields added to the enrollment (e.g. `automated_clean: false`). */
  node?: Record<string, unknown>;
}

export interface Rig {
  ironic: RunningIronic;
  bm: Baremetal;
  dir: string;
  images: ImageServer;
  disk: LoopDevice;
  agent: AgentProcess;
  /** Stops the agent process and starts a fresh one (a new boot of the ramdisk), e.g. after lockdown. */
  restartAgent(): Promise<AgentProcess>;
  uuid: string;
  mac: string;
  node(): Promise<NodeView>;
  /** Runs `baremetal node <verb> <uuid> [args]` and waits for the node to settle in `target`. */
  drive(verb: string, args: string[], target: string, timeoutMs?: number): Promise<NodeView>;
  /** Successful lookups the Ironic API has answered so far (from its request log). */
  lookups(): Promise<number>;
  /** The agent's and the conductor's last log lines, for failure messages. */
  explain(): Promise<string>;
  close(): Promise<void>;
}

/** MACs of this machine's physical NICs (those with a `device` link), as the agent reports them. */
export async function physicalMacs(): Promise<string[]> {
  const macs: string[] = [];
  for (const name of (await readdir('/sys/class/net')).sort()) {
    if (name === 'lo') continue;
    const ok = await access(join('/sys/class/net', name, 'device')).then(
      () => true,
      () => false,
    );
    if (!ok) continue;
    const mac = (await readFile(join('/sys/class/net', name, 'address'), 'utf8')).trim().toLowerCase();
    if (mac !== '00:00:00:00:00:00') macs.push(mac);
  }
  return macs;
}

function tailLines(text: string, n: number, filter?: RegExp): string {
  const lines = text.split('\n').filter((l) => l !== '' && (!filter || filter.test(l)));
  return lines.slice(-n).join('\n');
}

export async function createRig(name: string, opts: RigOptions = {}): Promise<Rig> {
  const cleanups: (() => Promise<unknown>)[] = [];
  const close = async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
  };
  try {
    const macs = await physicalMacs();
    if (macs.length === 0)
      throw new Error('this machine has no physical NIC (/sys/class/net/*/device): the agent cannot look itself up');
    const mac = macs[0]!;

    const ironic = await startIronic(opts.ironic);
    cleanups.push(() => ironic.stop());
    const dir = await mkdtemp(join(tmpdir(), `ina-${name}-`));
    // INA_KEEP_IRONIC_RUN keeps the agent's full log (here) next to Ironic's run directory
    if (!process.env.INA_KEEP_IRONIC_RUN) {
      noteStarted(inject('leftoversFile'), { kind: 'dir', path: dir });
      cleanups.push(() => rm(dir, { recursive: true, force: true }));
    }
    const images = await startImageServer(dir);
    cleanups.push(() => images.close());
    const disk = await attachLoop(DISK_BYTES);
    noteStarted(inject('leftoversFile'), { kind: 'loop', dev: disk.path, file: disk.file });
    cleanups.push(() => detachLoop(disk));

    const bm = new Baremetal(ironic);
    // one CLI call (`baremetal create`) enrolls the node with its port
    const enrollment = join(dir, 'enroll.json');
    await writeFile(
      enrollment,
      JSON.stringify({
        nodes: [
          {
            name,
            driver: 'fake-hardware',
            deploy_interface: 'direct',
            boot_interface: 'fake',
            power_interface: 'fake',
            management_interface: 'noop',
            network_interface: 'noop',
            properties: { cpu_arch: 'x86_64', root_device: { name: disk.path } },
            ports: [{ address: mac }],
            ...opts.node,
          },
        ],
      }),
    );
    await bm.run(['create', enrollment]);
    const uuid = (await bm.node(name)).uuid;
    // fake power starts as None; fast track needs the node "on"
    await bm.run(['node', 'power', 'on', uuid]);

    const startAgent = () =>
      startAgentProcess({
        apiUrl: ironic.url,
        disk: disk.path,
        dir,
        autoTls: opts.autoTls ?? ironic.requireTls,
        extraFlags: opts.agentFlags,
      });
    let agent = await startAgent();
    cleanups.push(() => agent.stop());

    const explain = async () =>
      `--- agent log (${agent.logFile}, last lines)${agent.exited() ? ' [agent process has EXITED]' : ''}\n${await agent.tail(30)}\n` +
      `--- conductor warnings/errors (last lines)\n${tailLines(await ironic.conductorLog(), 12, / (ERROR|WARNING) [\w.]+ \[/)}`;
    const rig: Rig = {
      ironic,
      bm,
      dir,
      images,
      disk,
      agent,
      uuid,
      mac,
      restartAgent: async () => {
        await agent.stop();
        agent = rig.agent = await startAgent();
        return agent;
      },
      node: () => bm.node(uuid),
      drive: async (verb, args, target, timeoutMs) => {
        await bm.run(['node', verb, uuid, ...args]);
        return waitForState(bm, uuid, target, { explain }, timeoutMs);
      },
      // 21.4 logs `"GET /v1/lookup?…" status: 200`, sid `GET /v1/lookup?… - 200 (…ms)`
      lookups: async () =>
        (await ironic.apiLog())
          .split('\n')
          .filter((l) => /"GET \/v1\/lookup\?[^"]*" status: 200| GET \/v1\/lookup\?\S* - 200 /.test(l)).length,
      explain,
      close,
    };
    return rig;
  } catch (err) {
    await close();
    throw err;
  }
}

/** Waits until the conductor has recorded a heartbeat from the agent (fast track: in enroll already). */
export async function waitForHeartbeat(rig: Rig, timeoutMs = 60_000): Promise<NodeView> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const node = await rig.node();
    if (node.driver_internal_info.agent_last_heartbeat && node.driver_internal_info.agent_url) return node;
    if (rig.agent.exited())
      throw new Error(`the agent process exited before it heartbeated to Ironic\n${await rig.explain()}`);
    if (Date.now() > deadline) {
      throw new Error(`the agent never heartbeated to Ironic within ${timeoutMs / 1000} s\n${await rig.explain()}`);
    }
    await new Promise((r) => setTimeout(r, 500));
  }
}
