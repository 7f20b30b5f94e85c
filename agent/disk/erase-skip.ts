// Disks a full erase leaves alone, as IPA does: the virtual-media floppy Ironic attaches (label
// `ir-vfd-dev`) and members of a software RAID (their md metadata belongs to the array). There is no
// udev in the ramdisk, so both are probed with blkid instead of /dev/disk/by-label and lsblk --fs.
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import { isRaidMember, probeUnlessAmbivalent } from './blkid.ts';
import { partitionPaths } from './partitions.ts';

export const VIRTUAL_MEDIA_LABEL = 'ir-vfd-dev';

/**
 * Why `disk` must not be erased, or null. IPA skips a disk whose probe fails; here the step fails instead,
 * since a skipped disk would be reported cleaned with its data still on it. A disk or partition whose
 * filesystem signatures blkid cannot choose between (a reused disk) is neither: it is probed for RAID
 * superblocks alone, and has no single label.
 */
export async function eraseSkipReason(disk: string, log?: Logger): Promise<string | null> {
  for (const dev of [disk, ...(await partitionPaths(disk))]) {
    const where = dev === disk ? '' : ` (partition ${dev})`;
    try {
      if (await isRaidMember(dev, log)) return `member of a software RAID${where}`;
      const found = await probeUnlessAmbivalent(dev, log);
      if (found !== 'ambivalent' && found.label === VIRTUAL_MEDIA_LABEL) {
        return `virtual media (label ${VIRTUAL_MEDIA_LABEL}${dev === disk ? '' : ` on ${dev}`})`;
      }
    } catch (err) {
      throw new BlockDeviceEraseError(
        `Error erasing block device ${disk}: cannot tell whether ${dev} is a software-RAID member or virtual media: ${errorText(err)}`,
      );
    }
  }
  return null;
}
