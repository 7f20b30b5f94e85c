// Moving a GPT's backup structures to the real end of a disk that is bigger than the image written to it
// (what `sgdisk -e` does, without its one-second settle): a pure function from the image's head to the
// sectors to write. The primary header gets the new backup location and last usable LBA; the backup
// header and a copy of the partition entries go at the end of the disk.
import { crc32 } from 'node:zlib';

export interface SectorWrite {
  offset: number;
  data: Buffer;
}

const SIGNATURE = 'EFI PART';

function headerCrc(header: Buffer, size: number): number {
  const copy = Buffer.from(header.subarray(0, size));
  copy.writeUInt32LE(0, 16);
  return crc32(copy);
}

/**
 * The writes that relocate the backup GPT of the image whose first bytes are `head` onto a disk of
 * `diskBytes`, or null when `head` holds no valid GPT for this sector size (or not all of its entries).
 */
export function relocateBackupGpt(head: Buffer, sectorSize: number, diskBytes: number): SectorWrite[] | null {
  const at = sectorSize;
  if (head.length < at + 92 || head.toString('latin1', at, at + 8) !== SIGNATURE) return null;
  const header = Buffer.from(head.subarray(at, at + sectorSize));
  const size = header.readUInt32LE(12);
  if (size < 92 || size > sectorSize || headerCrc(header, size) !== header.readUInt32LE(16)) return null;
  if (header.readBigUInt64LE(24) !== 1n) return null;

  const entriesLba = Number(header.readBigUInt64LE(72));
  const entryCount = header.readUInt32LE(80);
  const entrySize = header.readUInt32LE(84);
  const entriesBytes = entryCount * entrySize;
  const entriesStart = entriesLba * sectorSize;
  if (entrySize < 128 || entriesStart + entriesBytes > head.length) return null;
  const entries = head.subarray(entriesStart, entriesStart + entriesBytes);
  if (crc32(entries) !== header.readUInt32LE(88)) return null;

  const entrySectors = Math.ceil(entriesBytes / sectorSize);
  const lastLba = Math.floor(diskBytes / sectorSize) - 1;
  const backupEntriesLba = lastLba - entrySectors;
  const lastUsable = BigInt(backupEntriesLba - 1);
  if (lastUsable < header.readBigUInt64LE(48)) return null;

  header.writeBigUInt64LE(BigInt(lastLba), 32);
  header.writeBigUInt64LE(lastUsable, 48);
  header.writeUInt32LE(headerCrc(header, size), 16);

  const backup = Buffer.from(header);
  backup.writeBigUInt64LE(BigInt(lastLba), 24);
  backup.writeBigUInt64LE(1n, 32);
  backup.writeBigUInt64LE(BigInt(backupEntriesLba), 72);
  backup.writeUInt32LE(headerCrc(backup, size), 16);

  const backupEntries = Buffer.alloc(entrySectors * sectorSize);
  entries.copy(backupEntries);
  const mbr = protectiveMbrFor(head.subarray(0, 512), lastLba);
  return [
    ...(mbr ? [{ offset: 0, data: mbr }] : []),
    { offset: sectorSize, data: header },
    { offset: backupEntriesLba * sectorSize, data: backupEntries },
    { offset: lastLba * sectorSize, data: backup },
  ];
}

/** Cylinder/head/sector address of an LBA in the 255-head, 63-sector geometry, saturated as partitioning tools do. */
function chs(lba: number): [number, number, number] {
  const cylinder = Math.floor(lba / (255 * 63));
  if (cylinder > 1023) return [0xff, 0xff, 0xff];
  const head = Math.floor(lba / 63) % 255;
  const sector = (lba % 63) + 1;
  return [head, sector | ((cylinder >> 2) & 0xc0), cylinder & 0xff];
}

/** The protective MBR with its 0xEE entry grown to cover the whole disk, or null if there is none to grow. */
function protectiveMbrFor(sector0: Buffer, lastLba: number): Buffer | null {
  if (sector0.length < 512 || sector0[510] !== 0x55 || sector0[511] !== 0xaa) return null;
  const mbr = Buffer.from(sector0);
  for (let i = 0; i < 4; i++) {
    const entry = 446 + 16 * i;
    if (mbr[entry + 4] !== 0xee || mbr.readUInt32LE(entry + 8) !== 1) continue;
    mbr.writeUInt32LE(Math.min(lastLba, 0xffffffff), entry + 12);
    const [h, s, c] = chs(lastLba);
    mbr[entry + 5] = h;
    mbr[entry + 6] = s;
    mbr[entry + 7] = c;
    return mbr;
  }
  return null;
}
