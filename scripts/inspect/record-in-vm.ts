// Records a machine's tree for the inventory tests from a real kernel with what this host's kernel lacks
// (bonding, 8021q, mac80211_hwsim): the project's ramdisk (Debian's kernel) boots in QEMU with an
// overlay: the profile's init script as /init, the profile's extra modules (and what they depend on) from
// the same kernel package, and scripts/inspect/record-fixture.ts bundled. The tree comes back as a tar
// written to the profile's last disk. Profiles:
// - bond (default): 2 vCPUs, 1536 MiB, SMBIOS system and BIOS strings, two virtio NICs (bonded,
//   active-backup, VLAN 100 on the bond), a virtio system disk, an NVMe disk, a small virtio disk as tape.
// - laptop: QEMU with laptop-like devices, not a laptop: UEFI (OVMF) when installed, notebook-like SMBIOS
//   strings, Wi-Fi from mac80211_hwsim (one radio, wlan0), one e1000e NIC, an xHCI controller with a USB
//   keyboard, tablet and storage stick (the stick is the tape), one NVMe disk, no IPMI.
// Needs the built ramdisk (npm run build:ramdisk; --image-build <dir> reads another tree's image-build/out
// and image-build/cache, read-only). QEMU, so take the e2e lock:
//   flock /run/lock/ina-e2e.lock scripts/node.sh --import tsx scripts/inspect/record-in-vm.ts [--profile laptop] <out-dir>
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  mkdirSync,
  writeFileSync,
  truncateSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { build } from 'esbuild';
import { writeCpio, type CpioEntry } from '../../image-build/lib/cpio.ts';
import { resolveModules } from '../../image-build/lib/modules.ts';

const repo = resolve(import.meta.dirname, '../..');
const { values: opts, positionals } = parseArgs({
  allowPositionals: true,
  options: { profile: { type: 'string', default: 'bond' }, 'image-build': { type: 'string' } },
});
const usage = 'usage: record-in-vm.ts [--profile bond|laptop] [--image-build <dir>] <out-dir>';
if (positionals.length !== 1) throw new Error(usage);
if (opts.profile !== 'bond' && opts.profile !== 'laptop') throw new Error(`unknown profile ${opts.profile}; ${usage}`);
const laptop = opts.profile === 'laptop';
const out = resolve(positionals[0]!);
const imageBuild = resolve(opts['image-build'] ?? join(repo, 'image-build'));
const image = join(imageBuild, 'out');
const unpacked = join(imageBuild, 'cache/x');
const OVMF = { code: '/usr/share/OVMF/OVMF_CODE_4M.fd', vars: '/usr/share/OVMF/OVMF_VARS_4M.fd' };
const uefi = laptop && existsSync(OVMF.code) && existsSync(OVMF.vars);
const kernelPkg = readdirSync(unpacked).find((d) => /^linux-image-\d/.test(d));
if (!kernelPkg) throw new Error('no unpacked kernel package in image-build/cache/x: build the ramdisk first');
const modulesRoot = join(unpacked, kernelPkg, 'lib/modules');
const moduleDir = join(modulesRoot, readdirSync(modulesRoot)[0]!);

const work = mkdtempSync(join(tmpdir(), 'ina-record-'));
try {
  await build({
    entryPoints: [join(repo, 'scripts/inspect/record-fixture.ts')],
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    outfile: join(work, 'record.mjs'),
    banner: { js: "import { createRequire as __r } from 'node:module'; const require = __r(import.meta.url);" },
    logLevel: 'warning',
  });
  // usb-storage, sd_mod (the stick's disk) and e1000e are modules the ramdisk does not load; xHCI and the HID
  // drivers make the emulated USB devices bind as they would on real hardware.
  const mods = resolveModules(
    moduleDir,
    laptop
      ? ['mac80211_hwsim', 'xhci_pci', 'usb_storage', 'sd_mod', 'usbhid', 'hid_generic', 'e1000e']
      : ['bonding', '8021q'],
  );
  const init = laptop ? 'record-init-laptop.sh' : 'record-init.sh';
  const entries: CpioEntry[] = [
    { kind: 'file', path: 'init', mode: 0o755, data: readFileSync(join(repo, 'scripts/inspect', init)) },
    { kind: 'dir', path: 'record', mode: 0o755 },
    { kind: 'file', path: 'record/record.mjs', mode: 0o644, data: readFileSync(join(work, 'record.mjs')) },
    {
      kind: 'file',
      path: 'record/boot.sh',
      mode: 0o644,
      data: readFileSync(join(repo, 'scripts/inspect/record-boot.sh')),
    },
    {
      kind: 'file',
      path: 'record/modules',
      mode: 0o644,
      data: Buffer.from(mods.map((m) => basename(m.path)).join('\n')),
    },
    ...mods.map(
      (m): CpioEntry => ({
        kind: 'file',
        path: `record/${basename(m.path)}`,
        mode: 0o644,
        data: readFileSync(join(moduleDir, m.path)),
      }),
    ),
  ];
  writeCpio(join(work, 'overlay.cpio'), entries, 0);
  // The kernel unpacks concatenated archives in order, a later file replacing an earlier one (/init); each
  // archive starts on a 4-byte boundary after zero padding.
  const base = readFileSync(join(image, 'initramfs.img'));
  const pad = Buffer.alloc((512 - (base.length % 512)) % 512);
  writeFileSync(join(work, 'initrd.img'), Buffer.concat([base, pad, readFileSync(join(work, 'overlay.cpio'))]));
  const images = laptop
    ? ([
        ['nvme.img', 16 * 2 ** 30],
        ['tape.img', 64 * 2 ** 20],
      ] as const)
    : ([
        ['system.img', 8 * 2 ** 30],
        ['nvme.img', 2 * 2 ** 30],
        ['tape.img', 64 * 2 ** 20],
      ] as const);
  for (const [name, bytes] of images) {
    writeFileSync(join(work, name), '');
    truncateSync(join(work, name), bytes);
  }
  const nic = (i: number, mac: string) => [
    '-netdev',
    `user,id=n${i},restrict=on,net=10.0.${2 + i}.0/24`,
    '-device',
    `virtio-net-pci,netdev=n${i},mac=${mac},romfile=`,
  ];
  const disk = (id: string, file: string, device: string) => [
    '-drive',
    `file=${join(work, file)},if=none,id=${id},format=raw,cache=unsafe`,
    '-device',
    `${device},drive=${id}`,
  ];
  const serialLog = join(work, 'serial.log');
  const bondMachine = [
    ...['-smbios', 'type=0,vendor=SeaBIOS recorded,version=1.16.2-rec,date=04/01/2014'],
    ...['-smbios', 'type=1,manufacturer=INA Recorded Systems,product=Bonded Server B2,serial=REC-BOND-0001'],
    ...disk('d0', 'system.img', 'virtio-blk-pci,serial=RECSYS0'),
    ...disk('nv0', 'nvme.img', 'nvme,serial=RECNVME0001'),
    ...nic(0, '52:54:00:b0:0d:01'),
    ...nic(1, '52:54:00:b0:0d:02'),
    ...disk('d1', 'tape.img', 'virtio-blk-pci,serial=RECTAPE'),
  ];
  if (uefi) writeFileSync(join(work, 'vars.fd'), readFileSync(OVMF.vars));
  // QEMU 7.2 has no SMBIOS chassis-type option (type 3 always says "Other"); the strings are a notebook's.
  const laptopMachine = [
    ...(uefi
      ? [
          '-drive',
          `if=pflash,format=raw,readonly=on,file=${OVMF.code}`,
          '-drive',
          `if=pflash,format=raw,file=${join(work, 'vars.fd')}`,
        ]
      : []),
    ...['-smbios', 'type=1,manufacturer=INA Recorded Notebooks,product=Laptop-like L14 (QEMU),version=Rev 1'],
    ...['-smbios', 'type=1,serial=REC-LAPTOP-0001,sku=L14-QEMU,family=Laptop-like'],
    ...['-smbios', 'type=3,manufacturer=INA Recorded Notebooks,version=L14,serial=REC-CHASSIS-0001,asset=REC-ASSET-14'],
    ...disk('nv0', 'nvme.img', 'nvme,serial=RECLAPNVME01'),
    ...[
      '-netdev',
      'user,id=n0,restrict=on,net=10.0.2.0/24',
      '-device',
      'e1000e,netdev=n0,mac=52:54:00:1a:70:01,romfile=',
    ],
    ...['-device', 'qemu-xhci,id=xhci', '-device', 'usb-kbd,bus=xhci.0', '-device', 'usb-tablet,bus=xhci.0'],
    ...['-drive', `file=${join(work, 'tape.img')},if=none,id=stick,format=raw,cache=unsafe`],
    ...['-device', 'usb-storage,bus=xhci.0,drive=stick,serial=RECSTICK01,removable=on'],
  ];
  const qemu = spawnSync(
    'qemu-system-x86_64',
    [
      ...['-accel', 'tcg', '-cpu', 'max', '-m', '1536', '-smp', '2', '-nographic', '-no-reboot', '-monitor', 'none'],
      ...['-serial', `file:${serialLog}`, '-kernel', join(image, uefi ? 'vmlinuz' : 'vmlinux')],
      ...['-initrd', join(work, 'initrd.img'), '-append', 'console=ttyS0 panic=-1 quiet loglevel=3'],
      ...(laptop ? laptopMachine : bondMachine),
    ],
    { stdio: 'inherit', timeout: 15 * 60_000 },
  );
  const serial = readFileSync(serialLog, 'latin1');
  process.stdout.write(serial);
  if (qemu.status !== 0 || !serial.includes('record: done')) throw new Error('the recording VM did not finish');
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  execFileSync('tar', ['-xf', join(work, 'tape.img'), '-C', out]);
  // An all-zero tape untars to nothing without an error: the tape never reached the disk.
  if (!existsSync(join(out, 'lsblk.json'))) throw new Error(`the tape held no recording: ${out} is empty`);
  process.stdout.write(`recorded into ${out}\n`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
