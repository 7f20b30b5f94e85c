// The disks a cleaning step works on: every listed disk (within the allow-list when one is set) that is
// not skip-listed, not virtual media and not a software-RAID member. Read-only disks are never targets:
// a full erase refuses them unless the node says to skip them (agent_erase_skip_read_only), the
// metadata steps skip them, as IPA does. All targets are checked with the device guard before any is
// touched, so a protected disk fails the step up front instead of half-way through.
import type { AgentServices } from '../services.ts';
import { BlockDeviceEraseError, CleaningError } from '../errors.ts';
import { allowlistedNames, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { eraseSkipReason } from './erase-skip.ts';
import { skipList } from './skip-list.ts';

export interface CleaningTargets {
  targets: BlockDevice[];
  /** Devices left alone, with why: reported in the step's result. */
  skipped: { device: string; reason: string }[];
}

export async function cleaningTargets(
  services: AgentServices,
  readOnly: 'skip' | 'refuse-unless-allowed',
): Promise<CleaningTargets> {
  const allow = services.config.disks.allowlist;
  const allowed = await allowlistedNames(allow);
  const skippedByList = skipList(services);
  const skipReadOnly =
    readOnly === 'skip' || services.state.status.node?.driver_internal_info?.agent_erase_skip_read_only === true;
  const out: CleaningTargets = { targets: [], skipped: [] };
  for (const dev of await listBlockDevices(services)) {
    if (allow && !allowed.has(dev.name)) continue;
    if (skippedByList(dev)) {
      out.skipped.push({ device: dev.path, reason: 'skip_block_devices' });
      continue;
    }
    const why = await eraseSkipReason(dev.path, services.log);
    if (why) {
      out.skipped.push({ device: dev.path, reason: why });
      continue;
    }
    if (dev.readOnly) {
      if (!skipReadOnly) {
        throw new BlockDeviceEraseError(
          `Failed to invoke erase of device ${dev.path} as the device is flagged read-only, and the conductor has not signaled this is a permitted case.`,
        );
      }
      out.skipped.push({ device: dev.path, reason: 'read-only' });
      continue;
    }
    const verdict = await services.guard.verdict(dev.path);
    if (!verdict.ok) throw new CleaningError(`Refusing to erase ${dev.path}: ${verdict.reason}`);
    out.targets.push(dev);
  }
  for (const s of out.skipped) services.log.info(s, `not erasing ${s.device}: ${s.reason}`);
  return out;
}
