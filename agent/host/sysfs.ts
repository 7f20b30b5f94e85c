// Reading /sys (and /proc) the one way: a file that is missing, unreadable or empty is null, a directory that
// cannot be listed is empty. Both the device guard and the disk code ask sysfs, and must agree on that.
// The reads are synchronous behind the async API: the kernel answers them from memory, and a trip through
// libuv's thread pool for each costs more than the read itself (docs/inspection.md has the figures).
import { readdirSync, readFileSync } from 'node:fs';

export async function readSys(path: string): Promise<string | null> {
  try {
    const text = readFileSync(path, 'utf8').trim();
    return text === '' ? null : text;
  } catch {
    return null;
  }
}

export async function listSys(path: string): Promise<string[]> {
  try {
    return readdirSync(path);
  } catch {
    return [];
  }
}
