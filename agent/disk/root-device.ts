// Chooses the disk to deploy to: the node's root device hints if any, else the smallest disk of at
// least 4 GiB; never a skipped device, never one the device guard refuses. Callers choose once per command.
import type { AgentServices } from '../commands/types.ts';
import { isObject } from '../commands/params.ts';
import { DeviceNotFound } from '../errors.ts';
import { ipaView, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { HintError, matchesHints, parseHints, type ParsedHint } from './hints.ts';

export const MIN_ROOT_DISK_BYTES = 4 * 2 ** 30;

/** Hints as the node carries them: instance_info.root_device first, then properties.root_device. */
export function nodeRootHints(services: Pick<AgentServices, 'state'>): Record<string, unknown> | undefined {
  const node = services.state.status.node;
  const hints = node?.instance_info?.root_device ?? node?.properties?.root_device;
  return isObject(hints) && Object.keys(hints).length > 0 ? hints : undefined;
}

function parseOrThrow(hints: Record<string, unknown>, what: string): ParsedHint[] {
  try {
    return parseHints(hints);
  } catch (err) {
    if (err instanceof HintError) {
      throw new DeviceNotFound(`No suitable device was found for deployment using ${what} ${JSON.stringify(hints)} because they failed to validate: ${err.message}`);
    }
    throw err;
  }
}

/** The skip list: the agent's own `ipa-skip-block-devices` paths, plus the node's `skip_block_devices` hints. */
async function skipMatchers(services: Pick<AgentServices, 'config' | 'state'>): Promise<ParsedHint[][]> {
  const out = services.config.disks.skipBlockDevices.map((path) => parseOrThrow({ name: path }, 'skip_block_devices'));
  const list = services.state.status.node?.properties?.skip_block_devices;
  for (const entry of Array.isArray(list) ? list : []) {
    // RAID volumes are named by volume_name; they are not block devices of this list.
    if (!isObject(entry) || 'volume_name' in entry) continue;
    out.push(parseOrThrow(entry, 'skip_block_devices'));
  }
  return out;
}

function describe(d: BlockDevice): string {
  const gib = (d.size / 2 ** 30).toFixed(2);
  return `${d.path} (${gib} GiB${d.model ? `, model ${d.model}` : ''}${d.serial ? `, serial ${d.serial}` : ''})`;
}

/** The disks a root device may be chosen from, with why the others were left out. */
async function candidates(services: AgentServices): Promise<{ usable: BlockDevice[]; seen: string[] }> {
  const skip = await skipMatchers(services);
  const usable: BlockDevice[] = [];
  const seen: string[] = [];
  for (const dev of await listBlockDevices(services)) {
    if (skip.some((hints) => matchesHints(ipaView(dev), hints))) {
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
  const given = hints && Object.keys(hints).length > 0 ? hints : nodeRootHints(services);
  const parsed = given ? parseOrThrow(given, 'these hints') : null;
  const { usable, seen } = await candidates(services);
  const seenText = seen.length > 0 ? seen.join('; ') : 'no block devices at all';

  let chosen: BlockDevice | undefined;
  if (parsed) {
    chosen = usable.find((d) => matchesHints(ipaView(d), parsed));
    if (!chosen) {
      throw new DeviceNotFound(`No suitable device was found for deployment using these hints ${JSON.stringify(given)}. Devices seen: ${seenText}`);
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
