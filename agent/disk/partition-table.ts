// Reads a disk's partition table from the disk itself (`partx --show`), not from the kernel's view, so it
// is right straight after sgdisk/parted wrote it. Also the free-space arithmetic for a new tail partition.
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';
import { parseExport } from './blkid.ts';

export interface TableEntry {
  number: number;
  /** Bytes from the start of the disk. */
  start: number;
  size: number;
  /** GPT partition GUID, or `<disk id>-<nn>` on MBR (lowercase). */
  uuid: string;
  /** GPT type GUID, or the MBR type byte as `0x83`. */
  type: string;
}

/** `partx -g -P` prints one `KEY="value"` line per partition; START/SECTORS count 512-byte units. */
export function parsePartx(text: string): TableEntry[] {
  return text
    .split('\n')
    .filter((line) => line.trim() !== '')
    .map((line) => {
      const v = parseExport(line.replace(/" /g, '"\n').replace(/"/g, ''));
      return {
        number: Number(v.get('NR')),
        start: Number(v.get('START')) * 512,
        size: Number(v.get('SECTORS')) * 512,
        uuid: (v.get('UUID') ?? '').toLowerCase(),
        type: (v.get('TYPE') ?? '').toLowerCase(),
      };
    });
}

export async function readTable(disk: string, log?: Logger): Promise<TableEntry[]> {
  // partx exits 1 when the disk has a table with no partitions in it.
  const { stdout } = await run('partx', ['-g', '-P', '-o', 'NR,START,SECTORS,UUID,TYPE', disk], { okCodes: [1], log });
  return parsePartx(stdout);
}

export const MiB = 1024 * 1024;

export interface Region {
  /** First and last logical sector, inclusive. */
  first: number;
  last: number;
}

/**
 * Where a partition of `sizeBytes` goes at the end of a free region: its last sector is the region's
 * last, its start rounded down to a MiB boundary. Null when the region cannot hold it.
 */
export function tailPlacement(region: Region, sizeBytes: number, sectorSize: number): Region | null {
  const sectors = Math.ceil(sizeBytes / sectorSize);
  const align = Math.max(1, MiB / sectorSize);
  const first = Math.floor((region.last + 1 - sectors) / align) * align;
  if (first < region.first || first < 0) return null;
  return { first, last: first + sectors - 1 };
}

/** MBR: the free region after the last partition, within the 2^32-sector limit of the format. */
export function mbrTailRegion(entries: readonly TableEntry[], diskBytes: number, sectorSize: number): Region {
  const total = Math.min(Math.floor(diskBytes / sectorSize), 2 ** 32);
  const usedEnd = entries.reduce(
    (end, e) => Math.max(end, Math.ceil((e.start + e.size) / sectorSize)),
    Math.ceil(MiB / sectorSize),
  );
  return { first: usedEnd, last: total - 1 };
}
