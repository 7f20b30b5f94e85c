// The disks the agent may consider: lsblk's view of whole disks, completed from /sys (no udev in the
// ramdisk). Loop devices count only when the device allow-list names them, so tests can offer their own.
import { realpath } from 'node:fs/promises';
import type { AgentServices } from '../services.ts';
import type { Clock } from '../clock.ts';
import type { Config } from '../config/config.ts';
import type { Logger } from '../log.ts';
import { MIN_ROOT_DISK_BYTES } from './root-device.ts';
import { BlockDeviceError } from '../errors.ts';
import { run } from '../exec.ts';
import { listSys, readSys } from '../host/sysfs.ts';
import { sysByPath, sysHctl, sysIdentity, SYS_BLOCK } from './sysfs.ts';
import { identitySource, multipathMaps, withoutPaths, type MultipathMap } from '../host/multipath.ts';

export interface BlockDevice {
  /** Kernel name: `sda`, `nvme0n1`, `loop3`. */
  name: string;
  /** `/dev/<name>`. */
  path: string;
  size: number;
  model: string | null;
  vendor: string | null;
  serial: string | null;
  wwn: string | null;
  wwnWithExtension: string | null;
  wwnVendorExtension: string | null;
  rotational: boolean;
  hctl: string | null;
  byPath: string | null;
  logicalSectorSize: number;
  physicalSectorSize: number;
  /** lsblk TYPE: `disk`, `loop`, `raid1`, … */
  type: string;
  tran: string | null;
  readOnly: boolean;
}

const COLUMNS = 'KNAME,PATH,SIZE,MODEL,VENDOR,SERIAL,WWN,ROTA,HCTL,LOG-SEC,PHY-SEC,TYPE,TRAN,RO';

interface LsblkRow {
  kname: string;
  path: string;
  size: number | string | null;
  model: string | null;
  vendor: string | null;
  serial: string | null;
  wwn: string | null;
  rota: boolean | string | null;
  hctl: string | null;
  'log-sec': number | string | null;
  'phy-sec': number | string | null;
  type: string;
  tran: string | null;
  ro: boolean | string | null;
}

function parseLsblk(stdout: string): LsblkRow[] {
  let doc: unknown;
  try {
    doc = JSON.parse(stdout);
  } catch {
    throw new BlockDeviceError('lsblk printed something that is not JSON');
  }
  const rows = (doc as { blockdevices?: unknown }).blockdevices;
  if (!Array.isArray(rows)) throw new BlockDeviceError('lsblk output has no "blockdevices" list');
  for (const row of rows) {
    if (typeof row?.kname !== 'string' || typeof row?.type !== 'string') {
      throw new BlockDeviceError(`lsblk row without KNAME/TYPE: ${JSON.stringify(row)}`);
    }
  }
  return rows as LsblkRow[];
}

const flag = (v: boolean | string | null): boolean => v === true || v === '1';
const clean = (v: string | null | undefined): string | null => (v && v.trim() !== '' ? v.trim() : null);

/** Kernel names of the allow-listed devices (symlinks resolved). */
export async function allowlistedNames(allowlist: readonly string[] | null): Promise<Set<string>> {
  const out = new Set<string>();
  for (const entry of allowlist ?? []) {
    const real = await realpath(entry).catch(() => null);
    if (real) out.add(real.replace(/^\/dev\//, ''));
  }
  return out;
}

function wanted(row: LsblkRow, loops: Set<string>): boolean {
  if (/^(fd|ram|zram)\d*/.test(row.kname)) return false;
  if (Number(row.size ?? 0) <= 0) return false;
  if (row.type === 'loop') return loops.has(row.kname);
  return row.type === 'disk' || row.type.startsWith('raid') || row.type === 'mpath';
}

async function complete(row: LsblkRow, sysBlock: string, maps: readonly MultipathMap[]): Promise<BlockDevice> {
  // A multipath map has no identity of its own in sysfs (no udev for DM_SERIAL/DM_WWN): its LUN's, from a path.
  const idName = identitySource(row.kname, maps);
  const id = await sysIdentity(idName, sysBlock);
  const base = `${sysBlock}/${row.kname}`;
  const idBase = `${sysBlock}/${idName}`;
  const wwn = clean(row.wwn) ?? id.wwn;
  return {
    name: row.kname,
    // A multipath map by its kernel name, as IPA lists it: without udev no /dev/mapper node may exist.
    path: idName !== row.kname ? `/dev/${row.kname}` : row.path || `/dev/${row.kname}`,
    size: Number(row.size),
    model: clean(row.model) ?? (await readSys(`${idBase}/device/model`)),
    vendor: (await readSys(`${idBase}/device/vendor`)) ?? clean(row.vendor),
    serial: clean(row.serial) ?? id.serial,
    wwn,
    wwnWithExtension: id.wwnWithExtension ?? wwn,
    wwnVendorExtension: id.wwnVendorExtension,
    rotational: flag(row.rota),
    hctl: clean(row.hctl) ?? (await sysHctl(row.kname, sysBlock)),
    byPath: await sysByPath(row.kname, sysBlock),
    logicalSectorSize: Number(row['log-sec'] ?? (await readSys(`${base}/queue/logical_block_size`)) ?? 512),
    physicalSectorSize: Number(row['phy-sec'] ?? (await readSys(`${base}/queue/physical_block_size`)) ?? 512),
    type: row.type,
    tran: clean(row.tran),
    readOnly: flag(row.ro),
  };
}

/** A multipath map's row as lsblk would give it, read from sysfs (size in 512-byte units there). */
async function mapRow(kname: string, sysBlock: string): Promise<LsblkRow> {
  const q = (f: string) => readSys(`${sysBlock}/${kname}/queue/${f}`);
  return {
    kname,
    path: `/dev/${kname}`,
    size: Number((await readSys(`${sysBlock}/${kname}/size`)) ?? 0) * 512,
    model: null,
    vendor: null,
    serial: null,
    wwn: null,
    rota: await q('rotational'),
    hctl: null,
    'log-sec': await q('logical_block_size'),
    'phy-sec': await q('physical_block_size'),
    type: 'mpath',
    tran: null,
    ro: await readSys(`${sysBlock}/${kname}/ro`),
  };
}

/** Whole disks, md arrays and multipath maps (and allow-listed loop devices), in lsblk order. */
export async function listBlockDevices(services: Pick<AgentServices, 'config' | 'log'>): Promise<BlockDevice[]> {
  return blockDevicesFrom(await lsblkDisks(services.log), await allowlistedNames(services.config.disks.allowlist));
}

/**
 * lsblk's JSON for the disk list, md arrays included: `lsblk -d` leaves out every device stacked on others (an
 * md array is printed only as a child of its members), but prints one named on its command line.
 */
export async function lsblkDisks(log?: Logger, sysBlock = SYS_BLOCK): Promise<string> {
  const { stdout } = await run('lsblk', LSBLK_ARGS, { log, query: true });
  const arrays = (await listSys(sysBlock)).filter((n) => /^md\d+$/.test(n));
  if (arrays.length === 0) return stdout;
  // An array whose node is missing (mid-creation, stopped) must not hide the disks: it is left out.
  const md = await run('lsblk', [...LSBLK_ARGS, ...arrays.map((n) => `/dev/${n}`)], { log, query: true }).catch(
    () => null,
  );
  return md ? mergeLsblk(stdout, md.stdout) : stdout;
}

/** Two lsblk JSON documents as one: the rows of both, in order. */
export function mergeLsblk(a: string, b: string): string {
  return JSON.stringify({ blockdevices: [...parseLsblk(a), ...parseLsblk(b)] });
}

/** The lsblk command whose JSON `blockDevicesFrom` reads (recorded as is for test fixtures). */
export const LSBLK_ARGS = ['-J', '-b', '-d', '-a', '-o', COLUMNS];

/** Devices from lsblk's JSON, completed from the sysfs block directory `sysBlock`. */
export async function blockDevicesFrom(
  stdout: string,
  loops: Set<string>,
  sysBlock = SYS_BLOCK,
): Promise<BlockDevice[]> {
  const seen = new Set<string>();
  const rows = parseLsblk(stdout).filter((row) => {
    if (seen.has(row.kname) || !wanted(row, loops)) return false;
    seen.add(row.kname);
    return true;
  });
  // One disk per multipath LUN: the map, never its paths (agent/host/multipath.ts). `lsblk -d` shows only the
  // paths (the map is their holder), so the map's row comes from sysfs.
  const maps = await multipathMaps(sysBlock);
  for (const m of maps) if (!seen.has(m.name)) rows.push(await mapRow(m.name, sysBlock));
  const devices = await Promise.all(rows.map((row) => complete(row, sysBlock, maps)));
  return withoutPaths(devices, maps);
}

/** The IPA inventory/hint view of a device: the field names hints and `get_hardware_info` use. */
export function ipaView(d: BlockDevice): Record<string, string | number | boolean | null> {
  return {
    name: d.path,
    model: d.model,
    size: d.size,
    rotational: d.rotational,
    wwn: d.wwn,
    serial: d.serial,
    vendor: d.vendor,
    wwn_with_extension: d.wwnWithExtension,
    wwn_vendor_extension: d.wwnVendorExtension,
    hctl: d.hctl,
    by_path: d.byPath,
    logical_sectors: d.logicalSectorSize,
    physical_sectors: d.physicalSectorSize,
    tran: d.tran,
  };
}

export interface DiskWait {
  attempts: number;
  delayS: number;
  clock: Clock;
  log: Logger;
  signal?: AbortSignal;
  /** The devices as the deploy would see them (listBlockDevices on the live host). */
  list: () => Promise<BlockDevice[]>;
  /** Allow-listed devices, which count whatever their size (the operator named them). */
  allowlisted: Set<string>;
}

/**
 * IPA's wait for disks at start (`ipa-disk-wait-attempts` tries, `ipa-disk-wait-delay` apart): until a disk the
 * deploy could pick without hints shows up (at least 4 GiB, or allow-listed), since storage drivers may still be
 * finding their disks when the agent starts. Not finding one is logged, and the agent goes on, as IPA does.
 */
export async function waitForDisks(w: DiskWait): Promise<BlockDevice | undefined> {
  for (let attempt = 1; attempt <= w.attempts; attempt++) {
    let devices: BlockDevice[] = [];
    try {
      devices = await w.list();
    } catch (err) {
      w.log.debug({ err: (err as Error).message }, 'listing block devices failed');
    }
    const found = devices.find((d) => d.size >= MIN_ROOT_DISK_BYTES || w.allowlisted.has(d.name));
    if (found) return found;
    w.log.debug({ attempt, of: w.attempts }, 'still waiting for the root device to appear');
    if (attempt < w.attempts) await w.clock.sleep(w.delayS * 1000, w.signal);
    if (w.signal?.aborted) return undefined;
  }
  if (w.attempts > 0) {
    w.log.warn(
      { attempts: w.attempts, delayS: w.delayS },
      `the root device was not detected in ${w.delayS * (w.attempts - 1)} seconds`,
    );
  }
  return undefined;
}

/** The wait on the live host, as configured. */
export async function liveDiskWait(config: Config, log: Logger, clock: Clock, signal?: AbortSignal): Promise<DiskWait> {
  return {
    attempts: config.disks.waitAttempts,
    delayS: config.disks.waitDelayS,
    clock,
    log,
    signal,
    list: () => listBlockDevices({ config, log }),
    allowlisted: await allowlistedNames(config.disks.allowlist),
  };
}
