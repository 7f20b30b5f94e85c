// Recognises a config drive image from its header bytes: ISO9660 (primary volume descriptor at 32 KiB)
// or a FAT filesystem (boot sector), and reads its volume label. Pure functions over a Buffer.

export type DriveFormat = 'iso9660' | 'vfat';

export const CONFIG_DRIVE_LABEL = 'config-2';

export interface DriveIdentity {
  format: DriveFormat;
  label: string;
  /** The filesystem's own sector size: 2048 for ISO9660, the boot sector's bytes-per-sector for FAT. */
  sectorSize: number;
}

const ISO_PVD = 16 * 2048;

function isoIdentity(buf: Buffer): DriveIdentity | null {
  if (buf.length < ISO_PVD + 2048) return null;
  if (buf[ISO_PVD] !== 1 || buf.toString('latin1', ISO_PVD + 1, ISO_PVD + 6) !== 'CD001') return null;
  return { format: 'iso9660', label: buf.toString('latin1', ISO_PVD + 40, ISO_PVD + 72).trimEnd(), sectorSize: 2048 };
}

function fatIdentity(buf: Buffer): DriveIdentity | null {
  if (buf.length < 512 || buf[510] !== 0x55 || buf[511] !== 0xaa) return null;
  // FAT12/16 keep the extended boot record at 36, FAT32 at 64; the label follows its 0x29 signature.
  for (const [sigAt, labelAt, typeAt] of [
    [38, 43, 54],
    [66, 71, 82],
  ] as const) {
    if (buf[sigAt] === 0x29 && buf.toString('latin1', typeAt, typeAt + 3) === 'FAT') {
      return {
        format: 'vfat',
        label: buf.toString('latin1', labelAt, labelAt + 11).trimEnd(),
        sectorSize: buf.readUInt16LE(11),
      };
    }
  }
  return null;
}

/** The image's format and label, or null when it is neither ISO9660 nor FAT. */
export function identifyDrive(buf: Buffer): DriveIdentity | null {
  return isoIdentity(buf) ?? fatIdentity(buf);
}

export function isConfigDriveLabel(label: string | null | undefined): boolean {
  return (label ?? '').toLowerCase() === CONFIG_DRIVE_LABEL;
}

export function isGzip(buf: Buffer): boolean {
  return buf.length >= 2 && buf[0] === 0x1f && buf[1] === 0x8b;
}
