// A deterministic cpio "newc" writer: entries in byte order of their path, owner root, one fixed
// mtime, inode numbers by position. Device nodes are written as entries, so building needs no mknod.
import { closeSync, openSync, readFileSync, writeSync } from 'node:fs';

export type CpioEntry =
  | { kind: 'dir'; path: string; mode: number }
  | { kind: 'file'; path: string; mode: number; data: Buffer | (() => Buffer) }
  | { kind: 'symlink'; path: string; target: string }
  | { kind: 'chardev'; path: string; mode: number; major: number; minor: number };

const S_IFDIR = 0o040000;
const S_IFREG = 0o100000;
const S_IFLNK = 0o120000;
const S_IFCHR = 0o020000;

function hex8(n: number): string {
  return n.toString(16).padStart(8, '0');
}

function header(f: {
  ino: number; mode: number; nlink: number; mtime: number; size: number; rmajor: number; rminor: number; name: string;
}): Buffer {
  const nameBytes = Buffer.byteLength(f.name) + 1;
  const fields = [f.ino, f.mode, 0, 0, f.nlink, f.mtime, f.size, 0, 0, f.rmajor, f.rminor, nameBytes, 0];
  const text = '070701' + fields.map(hex8).join('') + f.name + '\0';
  return Buffer.from(text + '\0'.repeat(pad4(Buffer.byteLength(text))));
}

function pad4(n: number): number {
  return (4 - (n % 4)) % 4;
}

/** Writes the archive to `file`; returns the number of bytes written. */
export function writeCpio(file: string, entries: readonly CpioEntry[], mtime: number): number {
  const named = entries.map((e) => ({ e, name: e.path.replace(/^\/+/, '') }));
  named.sort((a, b) => Buffer.compare(Buffer.from(a.name), Buffer.from(b.name)));
  named.forEach((n, i) => {
    if (n.name === '' || (i > 0 && n.name === named[i - 1]!.name)) throw new Error(`cpio: bad or repeated entry name "${n.e.path}"`);
  });
  const fd = openSync(file, 'w');
  let written = 0;
  const put = (b: Buffer) => {
    writeSync(fd, b);
    written += b.length;
  };
  try {
    named.forEach(({ e, name }, i) => {
      const base = { ino: i + 1, mtime, rmajor: 0, rminor: 0, name, nlink: 1 };
      if (e.kind === 'dir') {
        put(header({ ...base, mode: S_IFDIR | e.mode, nlink: 2, size: 0 }));
      } else if (e.kind === 'chardev') {
        put(header({ ...base, mode: S_IFCHR | e.mode, size: 0, rmajor: e.major, rminor: e.minor }));
      } else {
        const data = e.kind === 'symlink' ? Buffer.from(e.target) : typeof e.data === 'function' ? e.data() : e.data;
        const mode = e.kind === 'symlink' ? S_IFLNK | 0o777 : S_IFREG | e.mode;
        put(header({ ...base, mode, size: data.length }));
        put(data);
        put(Buffer.alloc(pad4(data.length)));
      }
    });
    const trailer = header({ ino: 0, mode: 0, nlink: 1, mtime: 0, size: 0, rmajor: 0, rminor: 0, name: 'TRAILER!!!' });
    put(trailer);
  } finally {
    closeSync(fd);
  }
  return written;
}

export function fileFrom(path: string): () => Buffer {
  return () => readFileSync(path);
}
