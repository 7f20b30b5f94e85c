// The hardware inventory in IPA's shape (`list_hardware_info`): every key always present (null where
// unknown) except `bmc_mac`, which is left out when no BMC MAC was found.
import { blockDevicesFrom, ipaView } from '../disk/block-devices.ts';
import type { BmcInfo, Ipmitool } from './bmc.ts';
import { readBmc } from './bmc.ts';
import { readCpu, type CpuInfo } from './cpu.ts';
import type { HostRoot } from './host-root.ts';
import { readInterfaces, type InterfaceInfo, type InterfaceSources } from './interfaces.ts';
import { readMemory, type MemoryInfo } from './memory.ts';
import { readBoot, readHostname, readSystemVendor, type BootInfo, type SystemVendor } from './system.ts';

export type DiskInfo = ReturnType<typeof ipaView>;

export interface Inventory extends BmcInfo {
  interfaces: InterfaceInfo[];
  cpu: CpuInfo;
  disks: DiskInfo[];
  memory: MemoryInfo;
  system_vendor: SystemVendor;
  boot: BootInfo;
  hostname: string;
}

export interface InventorySources extends InterfaceSources {
  root: HostRoot;
  /** lsblk's JSON for the disk list (`lsblkDisks`: `LSBLK_ARGS`, md arrays added); recorded in test fixtures. */
  lsblk: () => Promise<string>;
  ipmitool: Ipmitool;
  /** Raw BOOTIF kernel parameter. */
  bootif?: string;
  /** Kernel names of allow-listed loop devices, which then count as disks (tests). */
  loops?: Set<string>;
}

/** Wall time of each part of one collection, in ms (the parts run concurrently: the longest sets the total). */
export type PartTimes = Record<string, number>;

/**
 * The parts are independent, so they run at once: lsblk (the one tool spawned) is in flight while /sys and
 * /proc are read. `times`, when given, receives each part's wall time.
 */
export async function collectInventory(src: InventorySources, times: PartTimes = {}): Promise<Inventory> {
  const { root } = src;
  const t0 = performance.now();
  const timed = async <T>(part: string, work: Promise<T>): Promise<T> => {
    const value = await work;
    times[part] = Math.round(performance.now() - t0);
    return value;
  };
  const lsblk = timed('lsblk', src.lsblk());
  const [disks, interfaces, cpu, memory, bmc, systemVendor, boot, hostname] = await Promise.all([
    timed(
      'disks',
      lsblk.then((out) => blockDevicesFrom(out, src.loops ?? new Set(), root.path('/sys/block'))),
    ),
    timed('interfaces', readInterfaces(root, src)),
    timed('cpu', readCpu(root)),
    timed('memory', readMemory(root)),
    timed('bmc', readBmc(root, src.ipmitool)),
    timed('system', readSystemVendor(root)),
    readBoot(root, src.bootif),
    readHostname(root),
  ]);
  return {
    interfaces,
    cpu,
    disks: disks.map(ipaView),
    memory,
    bmc_address: bmc.bmc_address,
    bmc_v6address: bmc.bmc_v6address,
    ...(bmc.bmc_mac ? { bmc_mac: bmc.bmc_mac } : {}),
    system_vendor: systemVendor,
    boot,
    hostname,
  };
}

/** IPA's `guess_root_disk`: the smallest disk of at least 4 GiB (ties by name). */
export function guessRootDisk(disks: readonly DiskInfo[]): DiskInfo | undefined {
  return [...disks]
    .sort((a, b) => Number(a.size) - Number(b.size) || String(a.name).localeCompare(String(b.name)))
    .find((d) => Number(d.size) >= 4 * 2 ** 30);
}

/** One line for the console and the log: `2 CPU x86_64, 2048 MiB, 2 disks, 2 NICs`. */
export function inventorySummary(inv: Inventory): string {
  const mem = inv.memory.physical_mb ?? (inv.memory.total !== null ? Math.round(inv.memory.total / 1048576) : '?');
  const vendor = [inv.system_vendor.manufacturer, inv.system_vendor.product_name].filter(Boolean).join(' ');
  return [
    `${inv.cpu.count} CPU ${inv.cpu.architecture}`,
    `${mem} MiB`,
    `${inv.disks.length} disk${inv.disks.length === 1 ? '' : 's'}`,
    `${inv.interfaces.length} NIC${inv.interfaces.length === 1 ? '' : 's'}`,
    ...(vendor ? [vendor] : []),
  ].join(', ');
}
