// Filesystem and partition-entry identity from a low-level `blkid -p` probe. lsblk cannot provide these
// inside the ramdisk: it reads them from the udev database, and there is no udev there.
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';

/** `blkid -p`'s exit code for signatures it cannot choose between. */
const AMBIVALENT = 8;

export interface Probe {
  /** Filesystem type (`vfat`, `iso9660`, `ext4`), or null. */
  fstype: string | null;
  label: string | null;
  /** Filesystem UUID (for vfat, the volume serial `ABCD-1234`). */
  uuid: string | null;
  /** GPT partition GUID, or `<disk id>-<nn>` on MBR. */
  partuuid: string | null;
  /** GPT partition name (PARTLABEL), or null. */
  partLabel: string | null;
  /** GPT partition type GUID, or the MBR type byte as `0xef`. */
  partType: string | null;
  /** Partition-table type of a whole disk: `gpt`, `dos`, or null. */
  ptType: string | null;
  ptUuid: string | null;
}

/** Parses `blkid -o export` output. */
export function parseExport(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const line of text.split('\n')) {
    const eq = line.indexOf('=');
    if (eq > 0) out.set(line.slice(0, eq), line.slice(eq + 1));
  }
  return out;
}

/** Probes one device, bypassing blkid's cache. Nothing recognisable is an all-null probe, not an error. */
export async function probe(dev: string, log?: Logger): Promise<Probe> {
  const { stdout } = await run('blkid', ['-p', '-o', 'export', dev], { okCodes: [2], log });
  return identity(stdout);
}

/**
 * As `probe`, but a device with signatures blkid will not choose between (two filesystems' on a reused disk:
 * `blkid -p` exits 8) is 'ambivalent' instead of an error: such a device has no single identity.
 */
export async function probeUnlessAmbivalent(dev: string, log?: Logger): Promise<Probe | 'ambivalent'> {
  const { stdout, exitCode } = await run('blkid', ['-p', '-o', 'export', dev], { okCodes: [2, AMBIVALENT], log });
  return exitCode === AMBIVALENT ? 'ambivalent' : identity(stdout);
}

function identity(exported: string): Probe {
  const v = parseExport(exported);
  const get = (k: string): string | null => v.get(k) || null;
  return {
    fstype: get('TYPE'),
    label: get('LABEL'),
    uuid: get('UUID'),
    partuuid: get('PART_ENTRY_UUID'),
    partLabel: get('PART_ENTRY_NAME'),
    partType: get('PART_ENTRY_TYPE'),
    ptType: get('PTTYPE'),
    ptUuid: get('PTUUID'),
  };
}

/**
 * Whether `dev` carries an md (Linux software RAID) superblock. Only RAID signatures are probed, so a disk
 * whose filesystem signatures are ambivalent still gets an answer; RAID signatures blkid cannot choose between
 * count as membership, since a superblock is there.
 */
export async function isRaidMember(dev: string, log?: Logger): Promise<boolean> {
  const { stdout, exitCode } = await run('blkid', ['-p', '-u', 'raid', '-o', 'export', dev], {
    okCodes: [2, AMBIVALENT],
    log,
  });
  return exitCode === AMBIVALENT || parseExport(stdout).get('TYPE') === 'linux_raid_member';
}
