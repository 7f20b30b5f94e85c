// Reading /sys, /proc and /dev, for the whole agent: a file that is missing, unreadable or empty is null, a
// directory that cannot be listed is empty. The device guard, the disk code and the inventory readers all ask
// through here and so agree on that. A HostRoot reads under one root directory, so that the inventory readers run
// against the live host ("/") and against recorded trees in tests.
// The reads are synchronous behind the async API: the kernel answers them from memory, and an inventory makes a
// few hundred of them, where a trip through libuv's thread pool for each costs more than the read itself (most
// under emulation; docs/inspection.md has the figures).
import { readFileSync, readdirSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { basename, join } from 'node:path';

export class HostRoot {
  constructor(readonly dir = '/') {}

  path(p: string): string {
    return join(this.dir, p);
  }

  /** A file's trimmed text, or null when it is missing, unreadable or empty. */
  async read(p: string): Promise<string | null> {
    const text = orNull(() => readFileSync(this.path(p), 'utf8').trim());
    return text === '' ? null : text;
  }

  async readBytes(p: string): Promise<Buffer | null> {
    return orNull(() => readFileSync(this.path(p)));
  }

  /** Directory entries, sorted; [] when the directory is missing. */
  async list(p: string): Promise<string[]> {
    return orNull(() => readdirSync(this.path(p)).sort()) ?? [];
  }

  async exists(p: string): Promise<boolean> {
    return statSync(this.path(p), { throwIfNoEntry: false }) !== undefined;
  }

  /** The last component of a symlink's target (`device` → `0000:00:03.0`, `driver` → `virtio_net`). */
  async linkName(p: string): Promise<string | null> {
    return orNull(() => basename(readlinkSync(this.path(p))));
  }

  async realpath(p: string): Promise<string | null> {
    return orNull(() => realpathSync(this.path(p)));
  }
}

/** What `read` gives, or null when the kernel (or a recorded tree) has no answer. */
function orNull<T>(read: () => T): T | null {
  try {
    return read();
  } catch {
    return null;
  }
}

export const liveRoot = new HostRoot('/');

/** `liveRoot.read` for an absolute path. */
export function readSys(path: string): Promise<string | null> {
  return liveRoot.read(path);
}

/** `liveRoot.list` for an absolute path. */
export function listSys(path: string): Promise<string[]> {
  return liveRoot.list(path);
}
