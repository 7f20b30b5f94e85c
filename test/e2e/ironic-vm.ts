// Real Ironic 39 (Debian sid's, scripts/ironic-sid) for the agent of the built ramdisk under QEMU (vm.ts).
// The Ironic suite's own start code (test/ironic/support/ironic.ts) runs it on 127.0.0.1. The guest's user-mode
// network reaches nothing but the forwards it is given (restrict=on): the API appears at HOST_IN_GUEST:6385.
// The conductor reaches the agent through the VM's forwarded agent port, which the agent advertises as
// 127.0.0.1:<that port>; auto-TLS puts that address in the agent's certificate (sid requires TLS).
//
//   if (!sidUnavailable()) await ensureSidChroot();       // builds the chroot on first use (about 11 min)
//   const rig = await startIronicForVm({ extraConf });     // Ironic's options, kind fixed to sid
//   const uuid = await rig.enroll({ driver: 'fake-hardware', … }, [{ address: mac }]);
//   rig.vm = await startVm({ forwards: rig.forwards, append: (port) => `${rig.kernelArgs(port)} …`, … });
//   await rig.waitForState(uuid, 'manageable');
//
// Fake power and boot: Ironic's power actions change nothing, so the test boots the VM when the node needs an
// agent, and the agent's own power-off and reboot commands end or restart the VM (vm.ts `-no-reboot`).
import { join, resolve } from 'node:path';
import { writeFile } from 'node:fs/promises';
import { execa } from 'execa';
import { Baremetal, type NodeView } from '../ironic/support/baremetal.ts';
import { startIronic, type IronicOptions, type RunningIronic } from '../ironic/support/ironic.ts';
import { waitForState } from '../ironic/support/wait-state.ts';
import { HOST_IN_GUEST, until, type GuestForward, type Vm } from './vm.ts';

/** The port on HOST_IN_GUEST where the guest finds Ironic's API (Ironic's usual one). */
export const IRONIC_PORT_IN_GUEST = 6385;

const ENSURE_CHROOT = resolve(import.meta.dirname, '../../scripts/ironic-sid/ensure-chroot.sh');

/** Why sid's Ironic cannot run on this machine, or undefined when it can. */
export function sidUnavailable(): string | undefined {
  if (process.getuid?.() !== 0)
    return 'sid Ironic needs root: its chroot is built with mmdebstrap and each daemon runs in its own namespaces';
  return undefined;
}

/**
 * The sid chroot, reused from /var/cache/ironic-node-agent/ironic-sid or built there (about 11 min cold, which
 * the caller's hook timeout must allow). ensure-chroot.sh's progress goes to this process's stderr.
 */
export async function ensureSidChroot(): Promise<void> {
  const r = await execa('bash', [ENSURE_CHROOT], { stdout: 'ignore', stderr: 'inherit', reject: false });
  if (r.exitCode !== 0)
    throw new Error(`${ENSURE_CHROOT} failed (exit ${r.exitCode}); its build log is beside the chroot (build.log)`);
}

export interface IronicForVm {
  ironic: RunningIronic;
  bm: Baremetal;
  /** The API's URL as the guest sees it. */
  apiUrlInGuest: string;
  /** Forwards for startVm (add your own beside them). */
  forwards: GuestForward[];
  /** The VM whose serial console failures quote; set it once started. */
  vm?: Vm;
  /** Kernel parameters that point the ramdisk's agent at this Ironic: ipa-api-url and the advertised address. */
  kernelArgs(agentPort: number): string;
  /** Enrolls a node with its ports through the `baremetal` CLI (`baremetal create`); returns its UUID. */
  enroll(node: Record<string, unknown> & { name: string }, ports: Record<string, unknown>[]): Promise<string>;
  /** GET on the API with the suite's microversion; anything but 200 throws with Ironic's answer. */
  get<T>(path: string): Promise<T>;
  /** POST, PUT, PATCH or DELETE with a JSON body; anything but 2xx throws with Ironic's answer. */
  send<T = unknown>(method: 'POST' | 'PUT' | 'PATCH' | 'DELETE', path: string, body?: unknown): Promise<T>;
  /** Waits for a provision state; another stable state fails at once with last_error and the logs. */
  waitForState(uuid: string, target: string, timeoutMs?: number): Promise<NodeView>;
  /** Waits until the node has an agent_url and a heartbeat from it. */
  heartbeated(uuid: string, timeoutMs?: number): Promise<NodeView>;
  /** The conductor's last warnings and errors and the VM console's last lines. */
  explain(): Promise<string>;
  stop(): Promise<void>;
}

export async function startIronicForVm(opts: Omit<IronicOptions, 'kind'> = {}): Promise<IronicForVm> {
  const ironic = await startIronic({ ...opts, kind: 'sid' });
  const bm = new Baremetal(ironic);
  const apiUrlInGuest = `http://${HOST_IN_GUEST}:${IRONIC_PORT_IN_GUEST}`;
  const rig: IronicForVm = {
    ironic,
    bm,
    apiUrlInGuest,
    forwards: [{ guestPort: IRONIC_PORT_IN_GUEST, hostPort: Number(new URL(ironic.url).port) }],
    kernelArgs: (agentPort) =>
      `ipa-api-url=${apiUrlInGuest} ipa-advertise-host=127.0.0.1 ipa-advertise-port=${agentPort}`,
    enroll: async (node, ports) => {
      const file = join(ironic.runDir, `enroll-${node.name}.json`);
      await writeFile(file, JSON.stringify({ nodes: [{ ...node, ports }] }));
      await bm.run(['create', file]);
      return (await bm.node(node.name)).uuid;
    },
    get: async <T>(path: string) => {
      const res = await fetch(`${ironic.url}${path}`, {
        headers: { 'X-OpenStack-Ironic-API-Version': ironic.apiVersion },
      });
      if (res.status !== 200) throw new Error(`GET ${path}: HTTP ${res.status} ${await res.text()}`);
      return (await res.json()) as T;
    },
    send: async <T>(method: string, path: string, body?: unknown) => {
      const res = await fetch(`${ironic.url}${path}`, {
        method,
        headers: { 'X-OpenStack-Ironic-API-Version': ironic.apiVersion, 'Content-Type': 'application/json' },
        body: body === undefined ? undefined : JSON.stringify(body),
      });
      const text = await res.text();
      if (res.status < 200 || res.status > 299) throw new Error(`${method} ${path}: HTTP ${res.status} ${text}`);
      return (text ? JSON.parse(text) : undefined) as T;
    },
    waitForState: (uuid, target, timeoutMs) => waitForState(bm, uuid, target, rig, timeoutMs),
    heartbeated: async (uuid, timeoutMs = 180_000) => {
      try {
        return await until(
          'a heartbeat from the agent in the VM',
          async () => {
            const n = await bm.node(uuid);
            return n.driver_internal_info.agent_url && n.driver_internal_info.agent_last_heartbeat ? n : undefined;
          },
          timeoutMs,
          1000,
        );
      } catch (err) {
        throw new Error(`${(err as Error).message}\n${await rig.explain()}`);
      }
    },
    explain: async () => {
      const conductor = (await ironic.conductorLog())
        .split('\n')
        .filter((l) => / (ERROR|WARNING) /.test(l))
        .slice(-12)
        .join('\n');
      const serial = rig.vm?.serial().split('\n').slice(-30).join('\n') ?? '(no VM)';
      return `--- conductor (warnings, errors)\n${conductor}\n--- VM console\n${serial}`;
    },
    stop: () => ironic.stop(),
  };
  return rig;
}
