// Disks a full erase leaves alone, as IPA does: the virtual-media floppy Ironic attaches (label
// `ir-vfd-dev`) and members of a software RAID (their md metadata belongs to the array). There is no
// udev in the ramdisk, so both are probed with blkid instead of /dev/disk/by-label and lsblk --fs.
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import { isRaidMember, probeUnlessAmbivalent, type Probe } from './blkid.ts';
import { partitionPaths } from './partitions.ts';

export const VIRTUAL_MEDIA_LABEL = 'ir-vfd-dev';

/** What blkid says of a disk or one of its partitions; the cleaning steps decide from these alone. */
export interface Identity {
  dev: string;
  raidMember: boolean;
  /** 'ambivalent': signatures blkid will not choose between (a reused disk): no single identity. */
  probe: Probe | 'ambivalent';
}

/**
 * The disk's identity, then its partitions'. IPA skips a disk whose probe fails; here the step fails instead,
 * since a skipped disk would be reported cleaned with its data still on it. RAID membership is probed from
 * RAID signatures alone, so an ambivalent disk still gets an answer.
 */
export async function identities(disk: string, log?: Logger): Promise<Identity[]> {
  const out: Identity[] = [];
  for (const dev of [disk, ...(await partitionPaths(disk))]) {
    try {
      out.push({ dev, raidMember: await isRaidMember(dev, log), probe: await probeUnlessAmbivalent(dev, log) });
    } catch (err) {
      throw new BlockDeviceEraseError(
        `Error erasing block device ${disk}: cannot tell whether ${dev} is a software-RAID member or virtual media: ${errorText(err)}`,
      );
    }
  }
  return out;
}

/** Why a disk with these identities (its own first) must not be erased, or null. */
export function eraseSkipReason(ids: readonly Identity[]): string | null {
  for (const [i, { dev, raidMember, probe }] of ids.entries()) {
    if (raidMember) return `member of a software RAID${i === 0 ? '' : ` (partition ${dev})`}`;
    if (probe !== 'ambivalent' && probe.label === VIRTUAL_MEDIA_LABEL) {
      return `virtual media (label ${VIRTUAL_MEDIA_LABEL}${i === 0 ? '' : ` on ${dev}`})`;
    }
  }
  return null;
}
