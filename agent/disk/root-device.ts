// Chooses the disk to deploy to: the node's root device hints if any, else the smallest disk of at
// least 4 GiB; never a skipped device, never one the device guard refuses. Callers choose once per command.
import type { AgentServices } from '../services.ts';
import { isObject, pythonFalsy } from '../parse.ts';
import { DeviceNotFound } from '../errors.ts';
import { ipaView, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { matchesHints, type DeviceView } from './hints.ts';
import { parseHintsOrThrow, skipList } from './skip-list.ts';
import { pathHintNote } from '../host/multipath.ts';
import { SYS_BLOCK } from './sysfs.ts';

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

/** The disks a root device may be chosen from, with why the others were left out. */
async function candidates(services: AgentServices): Promise<{ usable: BlockDevice[]; seen: string[] }> {
  const skipped = skipList(services);
  const usable: BlockDevice[] = [];
  const seen: string[] = [];
  for (const dev of await listBlockDevices(services)) {
    if (skipped(dev)) {
      seen.push(`${describe(dev)}: skipped by skip_block_devices`);
      continue;
    }
    const verdict = await services.guard.verdict(dev.path);
    if (!verdict.ok) {
      seen.push(`${describe(dev)}: protected, ${verdict.reason}`);
      continue;
    }
    seen.push(describe(dev));
    usable.push(dev);
  }
  return { usable, seen };
}

/** Picks the install disk. `hints` default to the node's; no match is a DeviceNotFound listing every disk seen. */
export async function chooseRootDevice(services: AgentServices, hints?: Record<string, unknown>): Promise<BlockDevice> {
  const given = hints && Object.keys(hints).length > 0 ? hints : rootHintsOf(services.state.status.node);
  const parsed = given ? parseHintsOrThrow(given, 'these hints') : null;
  const { usable, seen } = await candidates(services);
  const seenText = seen.length > 0 ? seen.join('; ') : 'no block devices at all';

  let chosen: BlockDevice | undefined;
  if (parsed) {
    chosen = usable.find((d) => matchesHints(selectionView(d), parsed));
    if (!chosen) {
      throw new DeviceNotFound(
        `No suitable device was found for deployment using these hints ${JSON.stringify(given)}. Devices seen: ${seenText}${await pathHintNote(given, SYS_BLOCK)}`,
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
  services.log.info({ device: chosen.path, size: chosen.size, hints: given ?? null }, 'root device chosen');
  return chosen;
}
