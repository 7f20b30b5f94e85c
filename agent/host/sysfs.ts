// Reading /sys (and /proc) the one way: a file that is missing, unreadable or empty is null, a directory that
// cannot be listed is empty. Both the device guard and the disk code ask sysfs, and must agree on that.
import { readFile, readdir } from 'node:fs/promises';

export async function readSys(path: string): Promise<string | null> {
  try {
    const text = (await readFile(path, 'utf8')).trim();
    return text === '' ? null : text;
  } catch {
    return null;
  }
}

export async function listSys(path: string): Promise<string[]> {
  try {
    return await readdir(path);
  } catch {
    return [];
  }
}
