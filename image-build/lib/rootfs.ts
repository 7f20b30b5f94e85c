// The ramdisk's file tree as a list of cpio entries, each remembering which input it came from, so
// the manifest can say how many bytes every package adds.
import { lstatSync, readlinkSync, realpathSync, statSync } from 'node:fs';
import { dirname, posix } from 'node:path';
import { fileFrom, type CpioEntry } from './cpio.ts';

export class Rootfs {
  readonly entries = new Map<string, CpioEntry & { origin: string; bytes: number }>();

  dir(path: string, mode = 0o755): void {
    const parent = posix.dirname(path);
    if (parent !== '/' && !this.entries.has(parent)) this.dir(parent);
    if (!this.entries.has(path)) this.entries.set(path, { kind: 'dir', path, mode, origin: 'ironic-node-agent', bytes: 0 });
  }

  private parent(path: string): void {
    const parent = posix.dirname(path);
    if (parent !== '/') this.dir(parent);
  }

  has(path: string): boolean {
    return this.entries.has(path);
  }

  symlink(path: string, target: string, origin = 'ironic-node-agent'): void {
    this.parent(path);
    this.entries.set(path, { kind: 'symlink', path, target, origin, bytes: target.length });
  }

  chardev(path: string, mode: number, major: number, minor: number): void {
    this.parent(path);
    this.entries.set(path, { kind: 'chardev', path, mode, major, minor, origin: 'ironic-node-agent', bytes: 0 });
  }

  /** Copies a host file (symlinks followed) to `path`; the mode keeps only permission bits. */
  file(path: string, source: string, origin: string, mode?: number): void {
    this.parent(path);
    const real = realpathSync(source);
    const st = statSync(real);
    this.entries.set(path, { kind: 'file', path, mode: mode ?? st.mode & 0o7777, data: fileFrom(real), origin, bytes: st.size });
  }

  data(path: string, content: string | Buffer, origin: string, mode = 0o644): void {
    this.parent(path);
    const data = Buffer.from(content);
    this.entries.set(path, { kind: 'file', path, mode, data, origin, bytes: data.length });
  }

  bytesBy(): Map<string, { files: number; bytes: number }> {
    const out = new Map<string, { files: number; bytes: number }>();
    for (const e of this.entries.values()) {
      const cur = out.get(e.origin) ?? { files: 0, bytes: 0 };
      out.set(e.origin, { files: cur.files + (e.kind === 'file' ? 1 : 0), bytes: cur.bytes + e.bytes });
    }
    return out;
  }
}

export function isSymlink(path: string): boolean {
  try {
    return lstatSync(path).isSymbolicLink();
  } catch {
    return false;
  }
}

/** Resolves one level of symlink inside an unpacked package folder (absolute targets are package-relative). */
export function linkTarget(pkgRoot: string, path: string): string {
  const t = readlinkSync(path);
  return t.startsWith('/') ? pkgRoot + t : posix.join(dirname(path), t);
}
