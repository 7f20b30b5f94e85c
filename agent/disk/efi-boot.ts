// Registers UEFI boot entries for loaders on a disk's ESP with efibootmgr. An entry that already points at
// the same loader is kept; one under the same label that points elsewhere (an ESP of an earlier deploy) is
// replaced, as IPA replaces entries by label. Writes firmware variables only (no `-w`: the disk is not touched).
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';
import { efibootmgrEnv, parseBootEntries, type BootEntry } from '../host/uefi-nvram.ts';
import type { EfiLoader } from './efi-loaders.ts';

export function firmwarePath(espPath: string): string {
  return `\\${espPath.replaceAll('/', '\\')}`;
}

/**
 * What to do for one loader given the firmware's entries: keep the entry that has its label and points at its
 * loader (on the partition with GUID `partuuid`, when known), and remove every other entry with that label.
 * Pure.
 */
export function entryPlan(
  entries: readonly BootEntry[],
  label: string,
  loaderPath: string,
  partuuid?: string | null,
): { keep: BootEntry | null; remove: BootEntry[] } {
  const same = entries.filter((e) => e.label.toLowerCase() === label.toLowerCase());
  const path = (e: BootEntry) => e.path.toLowerCase();
  const keep =
    same.find(
      (e) => path(e).includes(loaderPath.toLowerCase()) && (!partuuid || path(e).includes(partuuid.toLowerCase())),
    ) ?? null;
  return { keep, remove: same.filter((e) => e !== keep) };
}

/**
 * Registers each loader in the firmware under `root` (`/`, or a test's fake: config.ts's firmwareRoot);
 * returns what was done per loader, for the command's result. `partuuid`: the ESP's GPT partition GUID, so that
 * an entry for the same label and loader on another partition is not taken for this one.
 */
export async function registerBootEntries(
  disk: string,
  partition: number,
  loaders: readonly EfiLoader[],
  root: string,
  log?: Logger,
  partuuid?: string | null,
): Promise<string[]> {
  const env = efibootmgrEnv(root);
  const entries = parseBootEntries((await run('efibootmgr', ['-v'], { log, env })).stdout);
  const done: string[] = [];
  for (const loader of loaders) {
    const path = firmwarePath(loader.path);
    const { keep, remove } = entryPlan(entries, loader.label, path, partuuid);
    for (const e of remove) {
      await run('efibootmgr', ['-b', e.num, '-B'], { log, env });
      log?.info({ entry: e }, `UEFI boot entry Boot${e.num} (${e.label}) replaced`);
    }
    if (keep) {
      done.push(`${loader.label} (${path}) already registered`);
      continue;
    }
    await run('efibootmgr', ['-c', '-d', disk, '-p', String(partition), '-L', loader.label, '-l', path], {
      log,
      env,
    });
    done.push(`${loader.label} (${path}) registered`);
  }
  return done;
}
