// Devices the agent must leave alone: its own `ipa-skip-block-devices` paths plus the node's
// `properties.skip_block_devices` hint sets (entries naming RAID volumes are not block devices here).
import type { AgentServices } from '../services.ts';
import { isObject, pythonFalsy } from '../parse.ts';
import { DeviceNotFound } from '../errors.ts';
import type { BlockDevice } from './block-devices.ts';
import { ipaView } from './block-devices.ts';
import { HintError, matchesHints, parseHints, type ParsedHint } from './hints.ts';

export function parseHintsOrThrow(hints: Record<string, unknown>, what: string): ParsedHint[] {
  try {
    return parseHints(hints);
  } catch (err) {
    if (err instanceof HintError) {
      throw new DeviceNotFound(
        `No suitable device was found for deployment using ${what} ${JSON.stringify(hints)} because they failed to validate: ${err.message}`,
      );
    }
    throw err;
  }
}

export type SkipTest = (dev: BlockDevice) => boolean;

export function skipList(services: Pick<AgentServices, 'config' | 'state'>): SkipTest {
  const sets = services.config.disks.skipBlockDevices.map((path) =>
    parseHintsOrThrow({ name: path }, 'skip_block_devices'),
  );
  const list = services.state.status.node?.properties?.skip_block_devices;
  // A list the agent cannot read protects nothing: refuse it (IPA's parser fails on it too) rather than
  // treat it as empty and leave the disks it was meant to protect open to deploys and erasure.
  const refuse = (what: unknown) =>
    new DeviceNotFound(
      `properties.skip_block_devices must be a list of hint objects (e.g. [{"name": "/dev/sdb"}]); cannot use ${JSON.stringify(what)}`,
    );
  if (!pythonFalsy(list) && !Array.isArray(list)) throw refuse(list);
  for (const entry of Array.isArray(list) ? list : []) {
    if (!isObject(entry)) throw refuse(entry);
    if ('volume_name' in entry) continue;
    sets.push(parseHintsOrThrow(entry, 'skip_block_devices'));
  }
  return (dev) => sets.some((hints) => matchesHints(ipaView(dev), hints));
}
