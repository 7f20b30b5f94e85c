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
  /** lsblk's JSON for the disk list (`LSBLK_ARGS`); recorded in test fixtures. */
  lsblk: () => Promise<string>;
  ipmitool: Ipmitool;
  /** Raw BOOTIF kernel parameter. */
  bootif?: string;
  /** Kernel names of allow-listed loop devices, which then count as disks (tests). */
  loops?: Set<string>;
}

export async function collectInventory(src: InventorySources): Promise<Inventory> {
  const { root } = src;
  const disks = await blockDevicesFrom(await src.lsblk(), src.loops ?? new Set(), root.path('/sys/block'));
  const bmc = await readBmc(root, src.ipmitool);
  return {
    interfaces: await readInterfaces(root, src),
    cpu: await readCpu(root),
    disks: disks.map(ipaView),
    memory: await readMemory(root),
    bmc_address: bmc.bmc_address,
    bmc_v6address: bmc.bmc_v6address,
    ...(bmc.bmc_mac ? { bmc_mac: bmc.bmc_mac } : {}),
    system_vendor: await readSystemVendor(root),
    boot: await readBoot(root, src.bootif),
    hostname: await readHostname(root),
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
