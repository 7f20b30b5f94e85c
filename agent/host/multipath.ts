// Multipath SAN LUNs: dm-multipath (assembled by `multipath` at ramdisk start) shows a LUN reached over several
// paths as one dm device, `dm-N`, whose dm uuid is `mpath-<wwid>` and whose `slaves` are the path devices (sda,
// sdb, …). As in IPA, the map is the disk: it is listed, chosen and erased once, and the paths are left out of the
// disk list, since each is the same LUN and writing one alone bypasses the map. Everything is read from sysfs
// under a root given by the caller, so recorded trees test it.
import { listSys, readSys } from './sysfs.ts';

export interface MultipathMap {
  /** Kernel name of the map: `dm-0`. */
  name: string;
  /** The WWID multipath keyed the map by (the dm uuid without `mpath-`). */
  wwid: string;
  /** The map's dm name (`/dev/mapper/<alias>`), the WWID unless an alias was configured. */
  alias: string | null;
  /** Kernel names of its paths, sorted. */
  paths: string[];
}

/** The multipath maps under a sysfs block directory (`/sys/block` or `/sys/class/block`). */
export async function multipathMaps(sysBlock: string): Promise<MultipathMap[]> {
  const maps: MultipathMap[] = [];
  for (const name of (await listSys(sysBlock)).filter((n) => /^dm-\d+$/.test(n)).sort()) {
    const uuid = await readSys(`${sysBlock}/${name}/dm/uuid`);
    // Partition maps kpartx makes on top carry `partN-mpath-…`: not a LUN of their own.
    if (!uuid?.startsWith('mpath-')) continue;
    maps.push({
      name,
      wwid: uuid.slice('mpath-'.length),
      alias: await readSys(`${sysBlock}/${name}/dm/name`),
      paths: (await listSys(`${sysBlock}/${name}/slaves`)).sort(),
    });
  }
  return maps;
}

/** Path kernel name -> the map it belongs to. */
export function pathOwners(maps: readonly MultipathMap[]): Map<string, MultipathMap> {
  const out = new Map<string, MultipathMap>();
  for (const m of maps) for (const p of m.paths) out.set(p, m);
  return out;
}

/** The disk list as IPA shows it with multipath on: every path of a map left out, the maps kept. */
export function withoutPaths<T extends { name: string }>(disks: readonly T[], maps: readonly MultipathMap[]): T[] {
  const owners = pathOwners(maps);
  return disks.filter((d) => !owners.has(d.name));
}

/**
 * The device whose sysfs entries describe a map's LUN (serial, WWN, model, vendor): its first path, since the
 * dm device has none of its own and every path reports the same LUN. The name itself for anything else.
 */
export function identitySource(name: string, maps: readonly MultipathMap[]): string {
  return maps.find((m) => m.name === name)?.paths[0] ?? name;
}

/** `/dev/dm-0 (multipath map of LUN <wwid>, paths sda, sdb)`: how errors name a map. */
export function describeMap(m: MultipathMap): string {
  return `/dev/${m.name} (multipath map${m.alias ? ` /dev/mapper/${m.alias}` : ''} of LUN ${m.wwid}, paths ${m.paths.join(', ')})`;
}

/**
 * Why the device `name` (a disk or a partition, under the sysfs block directory `sysClassBlock`) must not be
 * chosen, written or erased on its own: it is a path of a multipath map, or a partition of one. Null otherwise.
 */
export async function pathOfMapReason(name: string, sysClassBlock: string): Promise<string | null> {
  for (const m of await multipathMaps(sysClassBlock)) {
    for (const p of m.paths) {
      const isPath = p === name;
      if (!isPath && (await readSys(`${sysClassBlock}/${p}/${name}/partition`)) === null) continue;
      return (
        `${isPath ? 'a path' : `on ${p}, a path`} of ${describeMap(m)}; a multipath LUN is written and erased only ` +
        `through its map: name /dev/${m.name} (or its serial or wwn) instead`
      );
    }
  }
  return null;
}

/**
 * When root device hints name a multipath path (by `name` or `hctl`, which a map does not have), the sentence
 * that tells the operator which map to name instead; empty otherwise. The paths are not candidates at all, so
 * such hints would otherwise end in a bare "no suitable device".
 */
export async function pathHintNote(hints: Record<string, unknown> | undefined, sysBlock: string): Promise<string> {
  if (!hints) return '';
  const maps = await multipathMaps(sysBlock);
  const name = typeof hints.name === 'string' ? hints.name.replace(/^(\/dev\/)?/, '') : null;
  for (const m of maps) {
    for (const p of m.paths) {
      const hctl = (await listSys(`${sysBlock}/${p}/device/scsi_device`))[0];
      if (p === name || (hctl !== undefined && hints.hctl === hctl)) {
        return `. The hints name /dev/${p}, a path of ${describeMap(m)}: a path is never chosen on its own; name the map instead`;
      }
    }
  }
  return '';
}
