// The disks a cleaning step works on: every listed disk (within the allow-list when one is set) that is
// not skipped. All are checked with the device guard before any is touched, so a protected disk fails
// the step up front instead of half-way through.
import type { AgentServices } from '../services.ts';
import { CleaningError } from '../errors.ts';
import { allowlistedNames, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { skipList } from './skip-list.ts';

export async function cleaningTargets(services: AgentServices): Promise<BlockDevice[]> {
  const allow = services.config.disks.allowlist;
  const allowed = await allowlistedNames(allow);
  const skipped = skipList(services);
  const skipReadOnly = services.state.status.node?.driver_internal_info?.agent_erase_skip_read_only === true;
  const targets: BlockDevice[] = [];
  for (const dev of await listBlockDevices(services)) {
    if ((allow && !allowed.has(dev.name)) || skipped(dev)) continue;
    if (dev.readOnly) {
      if (skipReadOnly) continue;
      throw new CleaningError(`Cannot erase ${dev.path}: the device is read-only`);
    }
    const verdict = await services.guard.verdict(dev.path);
    if (!verdict.ok) throw new CleaningError(`Refusing to erase ${dev.path}: ${verdict.reason}`);
    targets.push(dev);
  }
  return targets;
}
