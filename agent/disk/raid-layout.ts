// The holder disks' layout and the arrays IPA builds for a software RAID config, planned without touching
// a disk: the partition table type by boot mode, the room kept in front of the RAID partitions (the ESP in
// UEFI, the BIOS boot partition on GPT), one partition per logical disk on each of its holders, and the
// `mdadm --create` line of each array. Pure: the chosen holders and their sizes come in.
import { SoftwareRAIDError } from '../errors.ts';
import { isObject } from '../parse.ts';
import { partitionName } from './sysfs.ts';
import type { LogicalDisk } from './raid-config.ts';

const GiB = 2 ** 30;
const MiB = 2 ** 20;

export type BootMode = 'uefi' | 'bios';
export type TableType = 'gpt' | 'msdos';

/** Node capabilities, as Ironic stores them: an object, or the string `k1:v1,k2:v2`. */
export function capabilitiesOf(v: unknown): Record<string, string> {
  if (isObject(v)) return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, String(x)]));
  if (typeof v !== 'string') return {};
  const out: Record<string, string> = {};
  for (const pair of v.split(',')) {
    const at = pair.indexOf(':');
    if (at > 0) out[pair.slice(0, at).trim()] = pair.slice(at + 1).trim();
  }
  return out;
}

/**
 * The boot mode the instance will use, in IPA's order: secure boot means UEFI; then instance_info's
 * deploy_boot_mode, the node's boot_mode capability, driver_internal_info's deploy_boot_mode; last, how the
 * ramdisk itself booted.
 */
export function bootModeOf(node: unknown, ramdisk: BootMode): BootMode {
  const n = isObject(node) ? node : {};
  const ii = isObject(n.instance_info) ? n.instance_info : {};
  const props = isObject(n.properties) ? n.properties : {};
  const dii = isObject(n.driver_internal_info) ? n.driver_internal_info : {};
  const caps = { ...capabilitiesOf(props.capabilities), ...capabilitiesOf(ii.capabilities) };
  if (caps.secure_boot?.toLowerCase() === 'true') return 'uefi';
  for (const v of [ii.deploy_boot_mode, caps.boot_mode, dii.deploy_boot_mode]) {
    if (v === 'uefi' || v === 'bios') return v;
  }
  return ramdisk;
}

/** IPA's table type: GPT in UEFI; in BIOS, GPT only when the `disk_label` capability (instance first) says so. */
export function partitionTableType(node: unknown, bootMode: BootMode): TableType {
  if (bootMode === 'uefi') return 'gpt';
  const n = isObject(node) ? node : {};
  const fromInstance = capabilitiesOf(isObject(n.instance_info) ? n.instance_info.capabilities : undefined).disk_label;
  const label =
    fromInstance ?? capabilitiesOf(isObject(n.properties) ? n.properties.capabilities : undefined).disk_label;
  return label === 'gpt' ? 'gpt' : 'msdos';
}

/**
 * Where the first RAID partition starts, as a parted position: after the 550 MiB ESP IPA adds in UEFI (551 MiB),
 * after the BIOS boot partition on GPT (8 MiB), or at the first free sector of the empty msdos table
 * (`firstFreeSector`, from `sgdisk -F`).
 */
export function firstRaidStart(bootMode: BootMode, table: TableType, firstFreeSector: number | null): string {
  if (bootMode === 'uefi') return '551MiB';
  if (table === 'gpt') return '8MiB';
  if (firstFreeSector === null) throw new SoftwareRAIDError('the first free sector of the msdos table is unknown');
  return `${firstFreeSector}s`;
}

/** The bytes a parted start position stands for, with the sector size for `<n>s`. */
function startBytes(start: string, sectorSize: number): number {
  const m = /^(\d+)(MiB|GiB|s)$/.exec(start);
  if (!m) throw new SoftwareRAIDError(`unexpected partition start ${start}`);
  const n = Number(m[1]);
  return m[2] === 'MiB' ? n * MiB : m[2] === 'GiB' ? n * GiB : n * sectorSize;
}

export interface Holder {
  /** `/dev/vda`. */
  path: string;
  /** Kernel name: `vda`, `nvme0n1`. */
  name: string;
  size: number;
  logicalSectorSize: number;
}

export interface PlannedPartition {
  holder: string;
  number: number;
  /** The member's device path (`/dev/vda1`, `/dev/nvme0n1p1`). */
  device: string;
  /** parted positions: `551MiB`, `10GiB`, `-1` (end of disk). */
  start: string;
  end: string;
}

export interface PlannedArray {
  /** `/dev/md<index>`: the index is the position in the reordered list. */
  device: string;
  level: string;
  /** The array's name: the volume name, else `md<index>`. */
  name: string;
  logicalDisk: LogicalDisk;
  members: PlannedPartition[];
  /** The `mdadm` arguments that create it. */
  mdadmArgs: string[];
}

export interface RaidPlan {
  bootMode: BootMode;
  table: TableType;
  /** Every holder, in the order they are first used. */
  holders: Holder[];
  /** Per holder path, its partitions in the order they are made. */
  partitions: Map<string, PlannedPartition[]>;
  arrays: PlannedArray[];
}

/** IPA's order: the `MAX` logical disk last, so that the fixed-size one is placed first on every holder. */
export function orderLogicalDisks(disks: readonly LogicalDisk[]): LogicalDisk[] {
  return [...disks.filter((d) => d.sizeGb !== 'MAX'), ...disks.filter((d) => d.sizeGb === 'MAX')];
}

/** mdadm's level argument: Ironic's `1+0` is mdadm's `10`. */
export function mdadmLevel(level: string): string {
  return level === '1+0' ? '10' : level;
}

/**
 * The whole plan. `holdersOf[i]` are the holders of the i-th logical disk of `disks` (request order).
 * Refuses, before any disk is touched, a plan whose fixed-size partitions do not fit a holder.
 */
export function planRaid(
  disks: readonly LogicalDisk[],
  holdersOf: readonly (readonly Holder[])[],
  bootMode: BootMode,
  table: TableType,
  firstStart: string,
): RaidPlan {
  const ordered = orderLogicalDisks(disks);
  const holders: Holder[] = [];
  const partitions = new Map<string, PlannedPartition[]>();
  const arrays: PlannedArray[] = [];
  // IPA places each logical disk's partitions at the same absolute positions on all its holders: the first
  // ends at size_gb GiB from the disk's start (not size_gb long), each later one size_gb GiB further.
  let start = firstStart;
  let endGb = 0;
  ordered.forEach((ld, index) => {
    const mine = holdersOf[ld.position] ?? [];
    if (ld.sizeGb !== 'MAX') endGb += ld.sizeGb;
    const end = ld.sizeGb === 'MAX' ? '-1' : `${endGb}GiB`;
    const members: PlannedPartition[] = [];
    for (const h of mine) {
      if (!partitions.has(h.path)) {
        partitions.set(h.path, []);
        holders.push(h);
      }
      const list = partitions.get(h.path)!;
      const startAt = startBytes(start, h.logicalSectorSize);
      // GPT keeps 33 sectors at the end for its backup table.
      const usable = h.size - (table === 'gpt' ? 33 * h.logicalSectorSize : 0);
      const endAt = ld.sizeGb === 'MAX' ? usable : endGb * GiB;
      if (endAt > usable || endAt - startAt < MiB) {
        throw new SoftwareRAIDError(
          `Logical disk ${ld.position} (RAID-${ld.level}, ${ld.sizeGb === 'MAX' ? 'MAX' : `${ld.sizeGb} GiB`}) does not fit on ${h.path}: ` +
            `its partition would span ${start} to ${end} of a ${(h.size / GiB).toFixed(2)} GiB disk`,
        );
      }
      const number = list.length + 1;
      const p = { holder: h.path, number, device: `/dev/${partitionName(h.name, number)}`, start, end };
      list.push(p);
      members.push(p);
    }
    const device = `/dev/md${index}`;
    const name = ld.volumeName ?? `md${index}`;
    const level = mdadmLevel(ld.level);
    arrays.push({
      device,
      level: ld.level,
      name,
      logicalDisk: ld,
      members,
      mdadmArgs: [
        '--create',
        device,
        '--force',
        '--run',
        '--metadata=1',
        '--level',
        level,
        '--name',
        name,
        '--raid-devices',
        String(members.length),
        ...members.map((m) => m.device),
      ],
    });
    start = end;
  });
  return { bootMode, table, holders, partitions, arrays };
}

/**
 * The arrays of `plan` whose logical disk set `is_root_volume`, by device: what the root device choice obeys
 * once they are built (true: the root device, whatever the hints; false: never the root device).
 */
export function rootVolumesOf(plan: RaidPlan): Map<string, boolean> {
  const out = new Map<string, boolean>();
  for (const a of plan.arrays) if (a.logicalDisk.isRootVolume !== null) out.set(a.device, a.logicalDisk.isRootVolume);
  return out;
}

/**
 * A boot partition in the room the layout kept in front of a holder's RAID partitions (IPA adds it when the boot
 * loader is installed: the ESP under UEFI, the BIOS boot partition on GPT): from `start` for `size` bytes, in
 * logical sectors for sgdisk, with the first partition number not in use. Refused when a partition is in that
 * room (a layout made for the other boot mode). Pure.
 */
export function placeInFront(
  holder: string,
  partitions: readonly { number: number; start: number; size: number }[],
  sectorSize: number,
  room: { start: number; size: number; what: string; otherMode: BootMode },
): { number: number; firstSector: number; lastSector: number } {
  const end = room.start + room.size;
  const inTheWay = partitions.find((p) => p.start < end && p.start + p.size > room.start);
  if (inTheWay) {
    throw new SoftwareRAIDError(
      `No room for the ${room.size / MiB} MiB ${room.what} on ${holder} between ${room.start / MiB} and ${end / MiB} MiB: ` +
        `partition ${inTheWay.number} starts at ${(inTheWay.start / MiB).toFixed(2)} MiB (was the RAID built for ${room.otherMode === 'uefi' ? 'UEFI' : 'BIOS'} boot?)`,
    );
  }
  let number = 1;
  while (partitions.some((p) => p.number === number)) number++;
  return { number, firstSector: room.start / sectorSize, lastSector: end / sectorSize - 1 };
}
