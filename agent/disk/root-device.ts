// Chooses the disk to deploy to: the software RAID volume built with is_root_volume true if any, else the
// node's root device hints if any, else the smallest disk of at least 4 GiB; never a skipped device, never one
// the device guard refuses, never an array built with is_root_volume false nor its disks. Callers choose once
// per command.
import type { AgentServices } from '../services.ts';
import { isObject, pythonFalsy } from '../parse.ts';
import { DeviceNotFound } from '../errors.ts';
import { ipaView, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { matchesHints, type DeviceView } from './hints.ts';
import { parseHintsOrThrow, skipList } from './skip-list.ts';
import { pathHintNote } from '../host/multipath.ts';
import { SYS_BLOCK } from './sysfs.ts';
import { holderDisks, memberNames } from './md.ts';

export const MIN_ROOT_DISK_BYTES = 4 * 2 ** 30;

/**
 * A node's root device hints: instance_info.root_device, or properties.root_device where that is unset (an
 * empty `{}` in instance_info does not hide the node's own hints). Hints that are not an object are refused,
 * as IPA's parser refuses them, rather than read as "no hints" (which would pick the smallest disk).
 */
export function rootHintsOf(node: unknown): Record<string, unknown> | undefined {
  const n = isObject(node) ? node : {};
  const instance = isObject(n.instance_info) ? n.instance_info.root_device : undefined;
  const hints = pythonFalsy(instance) ? (isObject(n.properties) ? n.properties.root_device : undefined) : instance;
  if (pythonFalsy(hints)) return undefined;
  if (!isObject(hints))
    throw new DeviceNotFound(
      `No suitable device was found for deployment: the root device hints must be an object of hint names and values, got ${JSON.stringify(hints)}`,
    );
  return hints;
}

/**
 * What root device hints are matched against: IPA's view, with `wwn` also as udev's ID_WWN (the first 16
 * digits of a 32-digit NAA WWN), since IPA's disk selection matches the lsblk value or the udev ones.
 */
function selectionView(d: BlockDevice): DeviceView {
  const udevWwn = d.wwnVendorExtension && d.wwn ? d.wwn.slice(0, 18) : null;
  return { ...ipaView(d), wwn: udevWwn ? [d.wwn, udevWwn] : d.wwn };
}

function describe(d: BlockDevice): string {
  const gib = (d.size / 2 ** 30).toFixed(2);
  return `${d.path} (${gib} GiB${d.model ? `, model ${d.model}` : ''}${d.serial ? `, serial ${d.serial}` : ''})`;
}

/** A listed device, and why it may not be the root device (null: it may). */
export interface Candidate {
  device: BlockDevice;
  refused: string | null;
}

/** Every listed device, refused when skipped or when the device guard protects it. */
async function candidates(services: AgentServices): Promise<Candidate[]> {
  const skipped = skipList(services);
  const out: Candidate[] = [];
  for (const device of await listBlockDevices(services)) {
    if (skipped(device)) {
      out.push({ device, refused: 'skipped by skip_block_devices' });
      continue;
    }
    const verdict = await services.guard.verdict(device.path);
    out.push({ device, refused: verdict.ok ? null : `protected, ${verdict.reason}` });
  }
  return out;
}

/**
 * What the software RAID steps remembered of `is_root_volume` (state.raidRootVolumes), as IPA applies it: the
 * array marked true is the root device; an array marked false is left out, and with it its holder disks and
 * member partitions. Null `root` when no array is marked true; `excluded` maps device paths to the reason.
 */
export async function raidRootRule(
  remembered: ReadonlyMap<string, boolean>,
  sysBlock = SYS_BLOCK,
): Promise<{ root: string | null; excluded: Map<string, string> }> {
  let root: string | null = null;
  const excluded = new Map<string, string>();
  for (const [md, isRoot] of remembered) {
    if (isRoot) {
      root ??= md;
      continue;
    }
    const why = `left out, ${md} was built with is_root_volume false`;
    excluded.set(md, why);
    // An array stopped since it was built has neither: only its own name is left out.
    for (const disk of await holderDisks(md, sysBlock)) excluded.set(disk, why);
    for (const member of await memberNames(md, sysBlock)) excluded.set(`/dev/${member}`, why);
  }
  return { root, excluded };
}

const pathsOf = (d: BlockDevice): string[] => [d.path, `/dev/${d.name}`];

/**
 * The choice among listed devices (chooseRootDevice without the listing): the software RAID root volume if one
 * was built, else the first device matching `hints` (the node's by default), else the smallest of at least 4 GiB.
 */
export async function chooseAmong(
  services: Pick<AgentServices, 'state' | 'log'>,
  found: readonly Candidate[],
  hints?: Record<string, unknown>,
  sysBlock = SYS_BLOCK,
): Promise<BlockDevice> {
  const given = hints && Object.keys(hints).length > 0 ? hints : rootHintsOf(services.state.status.node);
  const raid = await raidRootRule(services.state.raidRootVolumes, sysBlock);
  const listed = found.map((c) => {
    if (c.refused) return c;
    const why = pathsOf(c.device)
      .map((p) => raid.excluded.get(p))
      .find(Boolean);
    return why ? { ...c, refused: why } : c;
  });
  const usable = listed.filter((c) => !c.refused).map((c) => c.device);
  const seen = listed.map((c) => (c.refused ? `${describe(c.device)}: ${c.refused}` : describe(c.device)));
  const seenText = seen.length > 0 ? seen.join('; ') : 'no block devices at all';

  let chosen: BlockDevice | undefined;
  if (raid.root) {
    const root = raid.root;
    const entry = listed.find((c) => pathsOf(c.device).includes(root));
    if (!entry || entry.refused) {
      throw new DeviceNotFound(
        `No suitable device was found for deployment: the software RAID volume ${root}, built with is_root_volume true, ` +
          `${entry ? `cannot be used (${entry.refused})` : 'is not listed'}. Devices seen: ${seenText}`,
      );
    }
    chosen = entry.device;
    if (given) {
      services.log.warn(
        { hints: given, device: chosen.path },
        'root device hints are overridden by the software RAID volume built with is_root_volume true',
      );
    }
  } else if (given) {
    const parsed = parseHintsOrThrow(given, 'these hints');
    chosen = usable.find((d) => matchesHints(selectionView(d), parsed));
    if (!chosen) {
      throw new DeviceNotFound(
        `No suitable device was found for deployment using these hints ${JSON.stringify(given)}. Devices seen: ${seenText}${await pathHintNote(given, sysBlock)}`,
      );
    }
  } else {
    chosen = [...usable]
      .sort((a, b) => a.size - b.size || a.name.localeCompare(b.name))
      .find((d) => d.size >= MIN_ROOT_DISK_BYTES);
    if (!chosen) {
      throw new DeviceNotFound(
        `No suitable device was found for deployment - root device hints were not provided and all found block devices are smaller than ${MIN_ROOT_DISK_BYTES}B. Devices seen: ${seenText}`,
      );
    }
  }
  services.log.info(
    { device: chosen.path, size: chosen.size, hints: given ?? null, raidRootVolume: raid.root },
    'root device chosen',
  );
  return chosen;
}

/** Picks the install disk. `hints` default to the node's; no match is a DeviceNotFound listing every disk seen. */
export async function chooseRootDevice(services: AgentServices, hints?: Record<string, unknown>): Promise<BlockDevice> {
  return chooseAmong(services, await candidates(services), hints);
}
