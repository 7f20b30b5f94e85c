// The disks a cleaning step works on: every listed disk (within the allow-list when one is set) that is
// not skip-listed, not virtual media and not a software-RAID member. Read-only disks are never targets:
// a full erase refuses them unless the node says to skip them (agent_erase_skip_read_only), the
// metadata steps skip them, as IPA does. All targets are checked with the device guard before any is
// touched, so a protected disk fails the step up front instead of half-way through.
import type { AgentServices } from '../services.ts';
import { BlockDeviceEraseError, CleaningError, ProtectedDeviceError } from '../errors.ts';
import { allowlistedNames, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { eraseSkipReason, identities, type Identity } from './erase-skip.ts';
import { skipList } from './skip-list.ts';

export interface CleaningTargets {
  targets: BlockDevice[];
  /** Devices left alone, with why: reported in the step's result. */
  skipped: { device: string; reason: string }[];
}

// IPA's safety_check_block_device: clustered filesystems may be a SAN volume other hosts are using.
// Lower case, as blkid prints them: IPA's upper-case GUIDs never match, which it does not intend.
const SHARED_FILESYSTEMS: ReadonlyMap<string, string> = new Map([
  ['37affc90-ef7d-4e96-91c3-2d7ae055b174', 'IBM GPFS Partition'],
  ['aa31e02a-400f-11db-9590-000c2911d1b8', 'VMware VMFS Partition (GPT)'],
  ['0xfb', 'VMware VMFS Partition (MBR)'],
  ['gfs2', 'Red Hat Global File System 2'],
]);

/** Throws ProtectedDeviceError when the disk or one of its partitions holds a shared filesystem. */
function refuseSharedFilesystems(ids: readonly Identity[]): void {
  for (const { dev, probe: p } of ids) {
    if (p === 'ambivalent') continue;
    for (const id of [p.uuid, p.ptUuid, p.partType, p.partuuid, p.fstype]) {
      const what = id && SHARED_FILESYSTEMS.get(id.toLowerCase());
      if (what) {
        throw new ProtectedDeviceError(
          `Protected ${what} located on device ${dev}. This volume or contents may be a shared block device. ` +
            "No disk was erased. If it is this node's own, erase it with the node's driver_internal_info " +
            'wipe_special_filesystems set to false, or with the agent started with ipa-guard-special-filesystems=false.',
        );
      }
    }
  }
}

/**
 * `sharedFilesystems: 'refuse'` is IPA's guard against erasing a clustered filesystem, off when the agent's
 * ipa-guard-special-filesystems or the node's driver_internal_info.wipe_special_filesystems is false. The erase
 * steps ask for it (IPA checks the whole disk's own identity in erase_devices, its partitions too in the others:
 * here every erase checks both, since a shared volume is lost alike); the disk burn-in reads and writes scratch
 * data it was told to, as IPA's does.
 */
export async function cleaningTargets(
  services: AgentServices,
  readOnly: 'skip' | 'refuse-unless-allowed',
  sharedFilesystems: 'refuse' | 'ignore',
): Promise<CleaningTargets> {
  const allow = services.config.disks.allowlist;
  const allowed = await allowlistedNames(allow);
  const skippedByList = skipList(services);
  const internal = services.state.status.node?.driver_internal_info;
  const skipReadOnly = readOnly === 'skip' || internal?.agent_erase_skip_read_only === true;
  const guardShared =
    sharedFilesystems === 'refuse' &&
    services.config.disks.guardSpecialFilesystems &&
    internal?.wipe_special_filesystems !== false;
  const out: CleaningTargets = { targets: [], skipped: [] };
  for (const dev of await listBlockDevices(services)) {
    if (allow && !allowed.has(dev.name)) continue;
    if (skippedByList(dev)) {
      out.skipped.push({ device: dev.path, reason: 'skip_block_devices' });
      continue;
    }
    const ids = await identities(dev.path, services.log);
    const why = eraseSkipReason(ids);
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
    if (guardShared) refuseSharedFilesystems(ids);
    out.targets.push(dev);
  }
  for (const s of out.skipped) services.log.info(s, `not erasing ${s.device}: ${s.reason}`);
  return out;
}
