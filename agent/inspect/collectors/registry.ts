// IPA's inspection collectors by name. Each adds its keys to the payload; one failing is recorded as
// `collector <name> failed: <why>` and the others still run (IPA's AccumulatedFailures).
import { GENERIC_NAME, GENERIC_VERSION } from '../../steps/builtin.ts';
import { collectSystemLogs } from '../../host/system-logs.ts';
import type { Logger, LogRing } from '../../log.ts';
import type { HostRoot } from '../host-root.ts';
import { candidateNames } from '../interfaces.ts';
import { guessRootDisk, type Inventory } from '../inventory.ts';
import type { LldpCapture } from '../lldp-capture.ts';
import { DMIDECODE_ARGS, groupDmi, parseDmidecode } from './dmi-decode.ts';
import { readNumaTopology } from './numa-topology.ts';
import { readPciDevices } from './pci-devices.ts';
import { readUsbDevices } from './usb-devices.ts';

export type Payload = Record<string, unknown>;

export interface CollectorContext {
  root: HostRoot;
  log: Logger;
  /** The agent's recent log lines, for the `logs` collector's archive. */
  logRing: LogRing;
  /** The inventory, collected once per inspection. */
  inventory: () => Promise<Inventory>;
  /** The collector names of this inspection, as given. */
  names: readonly string[];
  bootif?: string;
  /** Listens for LLDP on the named interfaces for ipa-lldp-timeout (lldp-capture.ts). */
  captureLldp: (names: string[]) => Promise<LldpCapture>;
  /** Runs a tool and returns its stdout (dmidecode). */
  run: (file: string, args: string[]) => Promise<string>;
  /** IPA's wait_for_dhcp before the default collector reads addresses. */
  waitForDhcp: () => Promise<void>;
}

export type Collector = (ctx: CollectorContext, data: Payload) => Promise<void>;

export const DEFAULT_COLLECTORS = ['default', 'logs'];

export const collectors: Readonly<Record<string, Collector>> = {
  default: async (ctx, data) => {
    await ctx.waitForDhcp();
    const inventory = await ctx.inventory();
    data.inventory = inventory;
    const root = guessRootDisk(inventory.disks);
    if (root) data.root_disk = root;
    data.boot_interface = ctx.bootif ?? null;
    data.configuration = {
      collectors: [...ctx.names],
      managers: [{ name: GENERIC_NAME, version: GENERIC_VERSION }],
    };
  },
  logs: async (ctx, data) => {
    data.logs = (await collectSystemLogs(ctx.log, ctx.logRing)).toString('base64');
  },
  'pci-devices': async (ctx, data) => {
    data.pci_devices = await readPciDevices(ctx.root);
  },
  // IPA's hardware manager returns {} when the capture fails, so a missing tool or an unreadable NIC costs the
  // switch data, not the inspection (Ironic fails an inspection whose `error` is set).
  lldp: async (ctx, data) => {
    const { frames, errors } = await ctx.captureLldp(await candidateNames(ctx.root));
    if (Object.keys(errors).length > 0) ctx.log.warn({ errors }, 'lldp: interfaces not listened to');
    data.lldp_raw = frames;
  },
  // Known to IPA (python-hardware's hardware-detect, which this ramdisk does not carry): a failure recorded
  // in `error` with the inventory still posted, as IPA does when the tool fails, not an unknown name.
  'extra-hardware': async () => {
    throw new Error(
      'hardware-detect (python-hardware) is not part of this agent; drop extra-hardware from ipa-inspection-collectors',
    );
  },
  'numa-topology': async (ctx, data) => {
    try {
      data.numa_topology = await readNumaTopology(ctx.root);
    } catch (err) {
      // IPA leaves the key out with a warning when the topology does not parse.
      ctx.log.warn({ err: (err as Error).message }, 'numa-topology: no NUMA information');
    }
  },
  'dmi-decode': async (ctx, data) => {
    data.dmi = groupDmi(parseDmidecode(await ctx.run('dmidecode', DMIDECODE_ARGS)));
  },
  'usb-devices': async (ctx, data) => {
    data.usb_devices = await readUsbDevices(ctx.root);
  },
};

export function failureText(failures: readonly string[]): string | null {
  if (failures.length === 0) return null;
  return `The following errors were encountered:\n${failures.map((f) => `* ${f}`).join('\n')}`;
}

/**
 * Runs the named collectors in order. An unknown name stops everything before any runs (IPA cannot load
 * its extension set then): the payload carries only the error.
 */
export async function runCollectors(
  ctx: CollectorContext,
  table = collectors,
): Promise<{ data: Payload; failures: string[] }> {
  const data: Payload = {};
  const unknown = ctx.names.filter((n) => !table[n]);
  if (unknown.length > 0) {
    const failures = [
      `Failed to load collector ${unknown.join(', ')}: no such collector (known: ${Object.keys(table).join(', ')})`,
    ];
    data.error = failureText(failures);
    return { data, failures };
  }
  const failures: string[] = [];
  for (const name of ctx.names) {
    try {
      await table[name]!(ctx, data);
    } catch (err) {
      failures.push(`collector ${name} failed: ${(err as Error).message}`);
      ctx.log.error({ collector: name, err: (err as Error).message }, 'inspection collector failed');
    }
  }
  data.error = failureText(failures);
  return { data, failures };
}
