// The machine as the inventory readers see it: /sys, /proc and /dev under one root directory, so the
// same readers run against the live host ("/") and against recorded trees in tests.
import { readFile, readdir, readlink, realpath, stat } from 'node:fs/promises';
import { basename, join } from 'node:path';

export class HostRoot {
  constructor(readonly dir = '/') {}

  path(p: string): string {
    return join(this.dir, p);
  }

  /** A file's trimmed text, or null when it is missing, unreadable or empty. */
  async read(p: string): Promise<string | null> {
    try {
      const text = (await readFile(this.path(p), 'utf8')).trim();
      return text === '' ? null : text;
    } catch {
      return null;
    }
  }

  async readBytes(p: string): Promise<Buffer | null> {
    return readFile(this.path(p)).catch(() => null);
  }

  /** Directory entries, sorted; [] when the directory is missing. */
  async list(p: string): Promise<string[]> {
    try {
      return (await readdir(this.path(p))).sort();
    } catch {
      return [];
    }
  }

  async exists(p: string): Promise<boolean> {
    return stat(this.path(p)).then(
      () => true,
      () => false,
    );
  }

  /** The last component of a symlink's target (`device` → `0000:00:03.0`, `driver` → `virtio_net`). */
  async linkName(p: string): Promise<string | null> {
    return readlink(this.path(p)).then(
      (t) => basename(t),
      () => null,
    );
  }

  async realpath(p: string): Promise<string | null> {
    return realpath(this.path(p)).catch(() => null);
  }
}

export const liveRoot = new HostRoot('/');
