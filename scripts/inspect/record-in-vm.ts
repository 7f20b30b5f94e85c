// Records a server's tree for the inventory tests from a real kernel with a bond and a VLAN. This host's
// kernel has neither bonding nor 8021q, so the project's ramdisk (Debian's kernel) boots in QEMU with an
// overlay: scripts/inspect/record-init.sh as /init, the bonding and 8021q modules (and what they depend on)
// from the same kernel package, and scripts/inspect/record-fixture.ts bundled. The machine: 2 vCPUs,
// 1536 MiB, SMBIOS system and BIOS strings, two virtio NICs (bonded, active-backup, VLAN 100 on the bond),
// a virtio system disk, an NVMe disk, and a small virtio disk the tree comes back on as a tar.
// Needs the built ramdisk (npm run build:ramdisk). QEMU, so take the e2e lock:
//   flock /tmp/ina-e2e.lock scripts/node.sh --import tsx scripts/inspect/record-in-vm.ts <out-dir>
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, mkdirSync, writeFileSync, truncateSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { build } from 'esbuild';
import { writeCpio, type CpioEntry } from '../../image-build/lib/cpio.ts';
import { resolveModules } from '../../image-build/lib/modules.ts';

const repo = resolve(import.meta.dirname, '../..');
const out = resolve(process.argv[2] ?? '');
if (!process.argv[2]) throw new Error('usage: record-in-vm.ts <out-dir>');
const image = join(repo, 'image-build/out');
const unpacked = join(repo, 'image-build/cache/x');
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
  const mods = resolveModules(moduleDir, ['bonding', '8021q']);
  const entries: CpioEntry[] = [
    { kind: 'file', path: 'init', mode: 0o755, data: readFileSync(join(repo, 'scripts/inspect/record-init.sh')) },
    { kind: 'dir', path: 'record', mode: 0o755 },
    { kind: 'file', path: 'record/record.mjs', mode: 0o644, data: readFileSync(join(work, 'record.mjs')) },
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
  for (const [name, bytes] of [
    ['system.img', 8 * 2 ** 30],
    ['nvme.img', 2 * 2 ** 30],
    ['tape.img', 64 * 2 ** 20],
  ] as const) {
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
  const qemu = spawnSync(
    'qemu-system-x86_64',
    [
      ...['-accel', 'tcg', '-cpu', 'max', '-m', '1536', '-smp', '2', '-nographic', '-no-reboot', '-monitor', 'none'],
      ...['-serial', `file:${serialLog}`, '-kernel', join(image, 'vmlinux'), '-initrd', join(work, 'initrd.img')],
      ...['-append', 'console=ttyS0 panic=-1 quiet loglevel=3'],
      ...['-smbios', 'type=0,vendor=SeaBIOS recorded,version=1.16.2-rec,date=04/01/2014'],
      ...['-smbios', 'type=1,manufacturer=INA Recorded Systems,product=Bonded Server B2,serial=REC-BOND-0001'],
      ...disk('d0', 'system.img', 'virtio-blk-pci,serial=RECSYS0'),
      ...disk('nv0', 'nvme.img', 'nvme,serial=RECNVME0001'),
      ...nic(0, '52:54:00:b0:0d:01'),
      ...nic(1, '52:54:00:b0:0d:02'),
      ...disk('d1', 'tape.img', 'virtio-blk-pci,serial=RECTAPE'),
    ],
    { stdio: 'inherit', timeout: 15 * 60_000 },
  );
  const serial = readFileSync(serialLog, 'latin1');
  process.stdout.write(serial);
  if (qemu.status !== 0 || !serial.includes('record: done')) throw new Error('the recording VM did not finish');
  rmSync(out, { recursive: true, force: true });
  mkdirSync(out, { recursive: true });
  execFileSync('tar', ['-xf', join(work, 'tape.img'), '-C', out]);
  process.stdout.write(`recorded into ${out}\n`);
} finally {
  rmSync(work, { recursive: true, force: true });
}
