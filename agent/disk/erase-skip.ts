// Disks a full erase leaves alone, as IPA does: the virtual-media floppy Ironic attaches (label
// `ir-vfd-dev`) and members of a software RAID (their md metadata belongs to the array). There is no
// udev in the ramdisk, so both are probed with blkid instead of /dev/disk/by-label and lsblk --fs.
import { errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import { probe } from './blkid.ts';
import { listPartitions } from './partitions.ts';

export const VIRTUAL_MEDIA_LABEL = 'ir-vfd-dev';

/** Why `disk` must not be erased, or null. A disk that cannot be probed is skipped, as in IPA. */
export async function eraseSkipReason(disk: string, log?: Logger): Promise<string | null> {
  try {
    const own = await probe(disk, log);
    if (own.label === VIRTUAL_MEDIA_LABEL) return `virtual media (label ${VIRTUAL_MEDIA_LABEL})`;
    if (own.fstype === 'linux_raid_member') return 'member of a software RAID';
    for (const part of await listPartitions(disk, log)) {
      if (part.fstype === 'linux_raid_member') return `member of a software RAID (partition ${part.path})`;
      if (part.label === VIRTUAL_MEDIA_LABEL) return `virtual media (label ${VIRTUAL_MEDIA_LABEL} on ${part.path})`;
    }
    return null;
  } catch (err) {
    return `could not be probed for RAID membership: ${errorText(err)}`;
  }
}
