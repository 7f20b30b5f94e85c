// A `target_raid_config` (or apply_configuration's `raid_config`) read and checked as IPA checks it
// (validate_configuration), before any disk is touched. Pure: the number of disks the agent lists and the
// skip list's volume names come in as facts. Every problem found is reported at once, joined by "; ",
// in one SoftwareRAIDError, as IPA does.
import { SoftwareRAIDError } from '../errors.ts';
import { isObject, pythonFalsy } from '../parse.ts';

/** The RAID levels IPA builds with mdadm: the first logical disk is always RAID-1, the second any of these. */
export const SECOND_LEVELS: readonly string[] = ['0', '1', '1+0', '5', '6'];
/** The fewest holder disks mdadm builds each level from (IPA checks 5 and 6; the others need two to mean anything). */
export const MIN_DISKS: Readonly<Record<string, number>> = { '0': 2, '1': 2, '1+0': 2, '5': 3, '6': 4 };

export interface LogicalDisk {
  /** Position in the request (0-based): error messages name it by this. */
  position: number;
  level: string;
  /** GiB, or 'MAX' for the rest of each holder. */
  sizeGb: number | 'MAX';
  volumeName: string | null;
  isRootVolume: boolean | null;
  /** Root-device-hint objects, one holder each; null: every disk the agent lists. */
  physicalDisks: Record<string, unknown>[] | null;
}

export interface RaidFacts {
  /** The node's uuid, for IPA's message. */
  nodeUuid: string;
  /** How many disks the agent lists (what RAID-5/6 without physical_disks would span). */
  diskCount: number;
  /** Volume names named in properties.skip_block_devices. */
  skipVolumeNames: readonly string[];
}

/** Whether the config asks for software RAID at all: IPA does nothing (and returns {}) when no disk says so. */
export function wantsSoftwareRaid(config: unknown): boolean {
  if (!isObject(config) || !Array.isArray(config.logical_disks)) return false;
  return config.logical_disks.some((d) => isObject(d) && d.controller === 'software');
}

function sizeOf(v: unknown): number | 'MAX' | null {
  if (v === 'MAX') return 'MAX';
  if (typeof v === 'number' && Number.isInteger(v) && v > 0) return v;
  return null;
}

/**
 * The logical disks of `config`, checked; null when the config is empty (nothing to build). Throws
 * SoftwareRAIDError naming every problem.
 */
export function validateRaidConfig(config: unknown, facts: RaidFacts): LogicalDisk[] | null {
  if (pythonFalsy(config)) return null;
  if (!isObject(config)) throw new SoftwareRAIDError(`RAID config must be an object, got ${JSON.stringify(config)}`);
  const raw = config.logical_disks;
  if (pythonFalsy(raw)) throw new SoftwareRAIDError('RAID config contains no logical disks');
  if (!Array.isArray(raw)) throw new SoftwareRAIDError('RAID config: logical_disks must be a list');
  const errors: string[] = [];
  const bad = raw.findIndex((d) => !isObject(d));
  if (bad >= 0)
    throw new SoftwareRAIDError(`RAID config: logical disk ${bad} is not an object: ${JSON.stringify(raw[bad])}`);
  const disks = raw as Record<string, unknown>[];

  if (disks.length < 1 || disks.length > 2)
    errors.push('Software RAID configuration requires one or two logical disks');
  if (!disks.every((d) => d.controller === 'software')) {
    errors.push("Software RAID configuration requires all logical disks to have 'controller'='software'");
  }
  if (facts.skipVolumeNames.length > 0 && !disks.every((d) => typeof d.volume_name === 'string' && d.volume_name)) {
    errors.push(
      'All logical disks are required to have a volume name specified as a volume name is mentioned in the property skip block devices.',
    );
  }
  const names = new Set<string>();
  disks.forEach((d, i) => {
    if (d.volume_name === undefined || d.volume_name === null) return;
    if (typeof d.volume_name !== 'string' || !/^[A-Za-z0-9_.-]{1,32}$/.test(d.volume_name)) {
      errors.push(
        `The volume_name of logical disk ${i} must be 1 to 32 letters, digits, '.', '_' or '-', got ${JSON.stringify(d.volume_name)}`,
      );
      return;
    }
    if (names.has(d.volume_name)) errors.push(`Duplicate software RAID device name ${d.volume_name} detected`);
    names.add(d.volume_name);
  });
  if (disks.filter((d) => d.is_root_volume === true).length > 1) {
    errors.push('Software RAID configuration allows only one logical disk to be marked as is_root_volume');
  }
  disks.forEach((d, i) => {
    if (d.physical_disks === undefined) return;
    if (!Array.isArray(d.physical_disks) || d.physical_disks.length < 2) {
      errors.push(
        `The physical_disks parameter for software RAID must be a list with at least 2 items, each specifying a disk device hint (logical disk ${i})`,
      );
    } else if (!d.physical_disks.every(isObject)) {
      errors.push(
        `The physical_disks parameter for software RAID must be a list of device hints (dictionaries) (logical disk ${i})`,
      );
    }
  });
  disks.forEach((d, i) => {
    if (typeof d.raid_level !== 'string') errors.push(`Logical disk ${i} has no raid_level (a string such as "1")`);
    if (sizeOf(d.size_gb) === null) {
      errors.push(
        `The size_gb of logical disk ${i} must be a whole number of GiB above 0 or "MAX", got ${JSON.stringify(d.size_gb)}`,
      );
    }
  });
  if (disks[0] && disks[0].raid_level !== '1') {
    errors.push('Software RAID Configuration requires RAID-1 for the first logical disk');
  }
  if (disks.length === 2) {
    if (disks[0]!.size_gb === 'MAX' && disks[1]!.size_gb === 'MAX') {
      errors.push("Software RAID can have only one RAID device with size 'MAX'");
    }
    const level = disks[1]!.raid_level;
    if (typeof level === 'string' && !SECOND_LEVELS.includes(level)) {
      errors.push(`Software RAID configuration does not support RAID level ${level}`);
    }
  }
  disks.forEach((d) => {
    const level = d.raid_level;
    if (typeof level !== 'string' || !(level in MIN_DISKS)) return;
    const holders = Array.isArray(d.physical_disks) ? d.physical_disks.length : facts.diskCount;
    if (holders < MIN_DISKS[level]!) {
      errors.push(
        `Software RAID configuration is not possible for RAID level ${level} with only ${holders} block devices found.`,
      );
    }
  });
  if (errors.length > 0) {
    throw new SoftwareRAIDError(`Could not validate Software RAID config for ${facts.nodeUuid}: ${errors.join('; ')}`);
  }
  return disks.map((d, position) => ({
    position,
    level: d.raid_level as string,
    sizeGb: sizeOf(d.size_gb)!,
    volumeName: typeof d.volume_name === 'string' ? d.volume_name : null,
    isRootVolume: typeof d.is_root_volume === 'boolean' ? d.is_root_volume : null,
    physicalDisks: Array.isArray(d.physical_disks) ? (d.physical_disks as Record<string, unknown>[]) : null,
  }));
}
