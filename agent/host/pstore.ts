// erase_pstore: the kernel's persistent store (crash dumps and console logs a previous tenant left in firmware
// NVRAM) is emptied as IPA does it: find the pstore mount in `proc/mounts`, delete everything in it. No pstore
// mounted means nothing to erase. The root is the host's `/` in a ramdisk, a test's folder elsewhere.
import { readdir, readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { CleaningError, errorText } from '../errors.ts';
import type { Logger } from '../log.ts';

/** The pstore mount point from a `/proc/mounts` text (fields: source, target, type, …), octal escapes undone. */
export function pstoreMountPoint(mounts: string): string | undefined {
  for (const line of mounts.split('\n')) {
    const [, target, type] = line.split(/\s+/);
    if (type === 'pstore' && target)
      return target.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
  }
  return undefined;
}

/** Deletes every entry of the mounted pstore under `root`; returns the names removed. */
export async function erasePstore(root: string, log: Logger): Promise<string[]> {
  const mounts = await readFile(join(root, 'proc', 'mounts'), 'utf8').catch((err: unknown) => {
    throw new CleaningError(`Cannot read ${join(root, 'proc', 'mounts')}: ${errorText(err)}`);
  });
  const mountPoint = pstoreMountPoint(mounts);
  if (!mountPoint) {
    log.info('no pstore mounted: nothing to erase');
    return [];
  }
  const dir = join(root, mountPoint);
  const names = (await readdir(dir)).sort();
  for (const name of names) await rm(join(dir, name), { recursive: true, force: true });
  log.info({ pstore: dir, removed: names }, `pstore erased: ${names.length} entries removed`);
  return names;
}
