// Records the parts of this machine's /sys, /proc and /dev the inventory readers use into a directory
// (test/fixtures/inspect/<name>), keeping sysfs symlinks as they are, plus lsblk's JSON and the
// interface addresses. Usage: scripts/node.sh --import tsx scripts/inspect/record-fixture.ts <out-dir>
import { execFileSync } from 'node:child_process';
import {
  lstatSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  readlinkSync,
  symlinkSync,
  writeFileSync,
  existsSync,
} from 'node:fs';
import { networkInterfaces } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { LSBLK_ARGS } from '../../agent/disk/block-devices.ts';

const out = resolve(process.argv[2] ?? '');
if (!process.argv[2]) throw new Error('usage: record-fixture.ts <out-dir>');

/** Recreates every symlink on the way to `path` inside `out`, then returns the resolved real path. */
function walk(path: string): string {
  let real = '/';
  for (const part of path.split('/').filter(Boolean)) {
    const next = join(real, part);
    let st: ReturnType<typeof lstatSync>;
    try {
      st = lstatSync(next);
    } catch {
      return next;
    }
    if (st.isSymbolicLink()) {
      const target = readlinkSync(next);
      const copy = join(out, next);
      mkdirSync(dirname(copy), { recursive: true });
      if (!existsSync(copy) && !lstatSafe(copy)) symlinkSync(target, copy);
      real = resolve(dirname(next), target);
    } else real = next;
  }
  return real;
}

const lstatSafe = (p: string) => {
  try {
    return lstatSync(p);
  } catch {
    return null;
  }
};

function file(path: string): void {
  const real = walk(path);
  let data: Buffer;
  try {
    if (!lstatSync(real).isFile()) return;
    data = readFileSync(real);
  } catch {
    return;
  }
  mkdirSync(dirname(join(out, real)), { recursive: true });
  writeFileSync(join(out, real), data);
}

/** A symlink itself (`device`, `driver`), without following it further. */
function link(path: string): void {
  const parent = walk(dirname(path));
  const st = lstatSafe(join(parent, path.split('/').at(-1)!));
  if (!st?.isSymbolicLink()) return;
  walk(join(parent, path.split('/').at(-1)!));
}

function dir(path: string): void {
  const real = walk(path);
  if (lstatSafe(real)?.isDirectory()) mkdirSync(join(out, real), { recursive: true });
}

const ls = (p: string): string[] => {
  try {
    return readdirSync(p).sort();
  } catch {
    return [];
  }
};

for (const f of [
  '/proc/cpuinfo',
  '/proc/meminfo',
  '/proc/sys/kernel/hostname',
  '/proc/sys/kernel/arch',
  '/proc/cmdline',
])
  file(f);
for (const b of ls('/proc/net/bonding')) file(`/proc/net/bonding/${b}`);
for (const f of ls('/sys/class/dmi/id')) file(`/sys/class/dmi/id/${f}`);
for (const e of ls('/sys/firmware/dmi/entries').filter((e) => /^(0|1|4|16|17)-/.test(e)))
  file(`/sys/firmware/dmi/entries/${e}/raw`);
dir('/sys/firmware/efi');
for (const cpu of ls('/sys/devices/system/cpu').filter((c) => /^cpu\d+$/.test(c))) {
  for (const f of [
    'topology/physical_package_id',
    'topology/core_id',
    'topology/thread_siblings_list',
    'cpufreq/cpuinfo_max_freq',
  ]) {
    file(`/sys/devices/system/cpu/${cpu}/${f}`);
  }
}
for (const node of ls('/sys/devices/system/node').filter((n) => /^node\d+$/.test(n))) {
  for (const f of ['meminfo', 'cpulist']) file(`/sys/devices/system/node/${node}/${f}`);
  for (const c of ls(`/sys/devices/system/node/${node}`).filter((c) => /^cpu\d+$/.test(c)))
    link(`/sys/devices/system/node/${node}/${c}`);
}
// cpu.count: lscpu's CPU(s) counts the CPUs present.
file('/sys/devices/system/cpu/present');
file('/sys/devices/system/memory/block_size_bytes');
for (const m of ls('/sys/devices/system/memory').filter((m) => /^memory\d+$/.test(m)))
  file(`/sys/devices/system/memory/${m}/online`);
for (const n of ls('/sys/class/net')) {
  const base = `/sys/class/net/${n}`;
  for (const f of [
    'address',
    'carrier',
    'type',
    'speed',
    'operstate',
    'addr_assign_type',
    'device/vendor',
    'device/device',
    'device/numa_node',
  ])
    file(`${base}/${f}`);
  link(`${base}/device`);
  link(`${base}/device/driver`);
  if (ls(`${base}/bonding`).length > 0) file(`${base}/bonding/slaves`);
  // A Wi-Fi NIC: the kernel marks it with `wireless/` and a link to its radio (phy80211).
  dir(`${base}/wireless`);
  link(`${base}/phy80211`);
}
for (const b of ls('/sys/block')) {
  const base = `/sys/block/${b}`;
  for (const f of [
    'size',
    'ro',
    'removable',
    'serial',
    'wwid',
    'queue/rotational',
    'queue/logical_block_size',
    'queue/physical_block_size',
    'device/model',
    'device/vendor',
    'device/serial',
    'device/wwid',
    // by_path: udev names an NVMe namespace by its nsid, an ATA disk by its port's port_no.
    'nsid',
  ])
    file(`${base}/${f}`);
  for (const h of ls(`${base}/device/scsi_device`)) dir(`${base}/device/scsi_device/${h}`);
  const ata = /^(.*\/(ata\d+))\//.exec(walk(base));
  if (ata) file(`${ata[1]}/ata_port/${ata[2]}/port_no`);
}
for (const p of ls('/sys/bus/pci/devices')) {
  for (const f of ['vendor', 'device', 'class', 'revision', 'numa_node']) file(`/sys/bus/pci/devices/${p}/${f}`);
}
for (const u of ls('/sys/bus/usb/devices')) {
  for (const f of ['product', 'manufacturer', 'idVendor', 'idProduct', 'busnum', 'devnum', 'bDeviceClass'])
    file(`/sys/bus/usb/devices/${u}/${f}`);
}
mkdirSync(join(out, 'dev'), { recursive: true });
for (const d of ls('/dev').filter((d) => d.startsWith('ipmi'))) writeFileSync(join(out, 'dev', d), '');
writeFileSync(join(out, 'lsblk.json'), execFileSync('lsblk', LSBLK_ARGS, { encoding: 'utf8' }));
writeFileSync(join(out, 'addresses.json'), `${JSON.stringify(networkInterfaces(), null, 1)}\n`);
// Git keeps no empty directory, yet several are what the readers look for (/sys/firmware/efi, a NIC's
// wireless/, scsi_device/<hctl>, /dev): each gets an empty `.keep` so the checked-in tree still has it.
const keepEmpty = (d: string): void => {
  const entries = readdirSync(d, { withFileTypes: true });
  if (entries.length === 0) writeFileSync(join(d, '.keep'), '');
  for (const e of entries) if (e.isDirectory()) keepEmpty(join(d, e.name));
};
keepEmpty(out);
process.stdout.write(`recorded into ${out}\n`);
