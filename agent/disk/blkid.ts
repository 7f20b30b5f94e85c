// Filesystem and partition-entry identity from a low-level `blkid -p` probe. lsblk cannot provide these
// inside the ramdisk: it reads them from the udev database, and there is no udev there.
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';

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
  const v = parseExport(stdout);
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
