// Registers UEFI boot entries for loaders on a disk's ESP with efibootmgr, skipping entries that already
// point at the same loader. Writes firmware variables only (no `-w`: the disk is not touched).
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';
import { efibootmgrEnv } from '../host/uefi-nvram.ts';
import type { EfiLoader } from './efi-loaders.ts';

export function firmwarePath(espPath: string): string {
  return `\\${espPath.replaceAll('/', '\\')}`;
}

/**
 * Registers each loader in the firmware under `root` (`/`, or a test's fake: config.ts's firmwareRoot);
 * returns what was done per loader, for the command's result.
 */
export async function registerBootEntries(
  disk: string,
  partition: number,
  loaders: readonly EfiLoader[],
  root: string,
  log?: Logger,
): Promise<string[]> {
  const env = efibootmgrEnv(root);
  const existing = (await run('efibootmgr', ['-v'], { log, env })).stdout.toLowerCase().split('\n');
  const done: string[] = [];
  for (const loader of loaders) {
    const path = firmwarePath(loader.path);
    if (existing.some((line) => line.includes(loader.label.toLowerCase()) && line.includes(path.toLowerCase()))) {
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
