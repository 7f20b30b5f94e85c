// clean_uefi_nvram: removes the UEFI boot entries whose device path matches the given patterns (by default
// entries pointing at a disk, or at shim/grub loaders), with efibootmgr as IPA does. Under a test's firmware
// root, efibootmgr works on that root's efivars folder (libefivar's EFIVARFS_PATH), never the host's.
import { join } from 'node:path';
import { InvalidCommandParamsError } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';

export const DEFAULT_MATCH_PATTERNS = ['^HD\\(', 'shim.*\\.efi', 'grub.*\\.efi'];

/** Where a device path starts in an `efibootmgr -v` line (after the label). */
const PATH_START = /(BBS|HD|FvFile|FvVol|PciRoot|VenMsg|VenHw|UsbClass)\(/;
const ENTRY = /^Boot([0-9A-Fa-f]{4})\*?\s+(.*)$/;

export interface BootEntry {
  num: string;
  label: string;
  path: string;
}

/** Validates `match_patterns` (a list of regular expressions) and compiles them, case-insensitive. */
export function parseMatchPatterns(value: unknown): RegExp[] {
  const bad = (why: string) => new InvalidCommandParamsError(`The match_patterns must be a list of strings: ${why}`);
  if (value === undefined || value === null) return DEFAULT_MATCH_PATTERNS.map((p) => new RegExp(p, 'i'));
  if (!Array.isArray(value)) throw bad(`got ${JSON.stringify(value)}`);
  return value.map((p, i) => {
    if (typeof p !== 'string' || p === '') throw bad(`item ${i} is ${JSON.stringify(p)}`);
    try {
      return new RegExp(p, 'i');
    } catch (err) {
      throw bad(`item ${i} (${JSON.stringify(p)}) is not a valid regular expression: ${(err as Error).message}`);
    }
  });
}

/** The boot entries of an `efibootmgr -v` listing that carry a device path. */
export function parseBootEntries(text: string): BootEntry[] {
  const out: BootEntry[] = [];
  for (const line of text.split('\n')) {
    const m = ENTRY.exec(line.trim());
    if (!m) continue;
    const rest = m[2]!;
    const at = rest.search(PATH_START);
    if (at < 0) continue;
    out.push({ num: m[1]!.toUpperCase(), label: rest.slice(0, at).trim(), path: rest.slice(at).trim() });
  }
  return out;
}

/** efibootmgr's environment for a firmware root: the host's efivars under `/`, else the root's own. */
export function efibootmgrEnv(root: string): Record<string, string> | undefined {
  return root === '/' ? undefined : { EFIVARFS_PATH: `${join(root, 'sys', 'firmware', 'efi', 'efivars')}/` };
}

/** Removes the matching entries; returns them. `root` is `/` (the host's firmware) or a test's fake root. */
export async function cleanUefiNvram(root: string, patterns: readonly RegExp[], log: Logger): Promise<BootEntry[]> {
  const env = efibootmgrEnv(root);
  const entries = parseBootEntries((await run('efibootmgr', ['-v'], { log, env })).stdout);
  const doomed = entries.filter((e) => patterns.some((p) => p.test(e.path)));
  for (const e of doomed) {
    await run('efibootmgr', ['-b', e.num, '-B'], { log, env });
    log.info({ entry: e }, `UEFI boot entry Boot${e.num} (${e.label}) removed`);
  }
  log.info({ removed: doomed.length, kept: entries.length - doomed.length }, 'UEFI NVRAM cleaned');
  return doomed;
}
