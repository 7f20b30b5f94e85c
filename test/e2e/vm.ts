// Boots the built ramdisk in QEMU for the e2e tests (or an instance, from its disks through the firmware): virtio
// disk files, user-mode networking with `restrict=on` (the guest reaches nothing but the forwards given here), the
// agent's port forwarded to a free loopback port, and the serial console written to a file. KVM only where a real
// one is loaded (kvm_intel/kvm_amd); elsewhere TCG.
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Socket } from 'node:net';
import { join } from 'node:path';
import { until } from '../helpers/until.ts';

const repo = join(import.meta.dirname, '..', '..');
export const OUT = join(repo, 'image-build', 'out');
const CONNECTOR = join(import.meta.dirname, 'connector.mjs');
/** The address on the guest's network where the host's services appear (guestfwd). */
export const HOST_IN_GUEST = '10.0.2.100';

export interface GuestForward {
  /** Port on HOST_IN_GUEST. */
  guestPort: number;
  /** Port on the host's 127.0.0.1. */
  hostPort: number;
}

/** A virtio disk at a fixed PCI slot: the same device path in the firmware whichever other disks are present. */
export interface SlottedDisk {
  file: string;
  serial: string;
  /** PCI slot on the root bus (0x10 and up are never taken by QEMU's automatic placement here). */
  pciSlot: number;
}

export interface VmOptions {
  /** The first disk (/dev/vda); `moreDisks` follow as /dev/vdb and on (serials E2EDISK0, 1, …). */
  disk?: string;
  moreDisks?: string[];
  /** Virtio disks at fixed PCI slots, after `disk` and `moreDisks`: a disk left out leaves the others in place. */
  slottedDisks?: SlottedDisk[];
  /**
   * `kernel` (default): the built ramdisk, started by QEMU with `append`'s kernel line. `firmware`: the
   * firmware boots from the disks as a server does (UEFI: the boot entries in `uefi.vars`); `append` is unused.
   */
  boot?: 'kernel' | 'firmware';
  /**
   * Disks on other controllers: an NVMe namespace (QEMU's `nvme`), a SATA disk on an AHCI controller, an ISO
   * in a SATA CD-ROM drive (read-only: the guest's /dev/sr0), or a removable USB stick (a BMC's virtual media).
   */
  otherDisks?: { file: string; bus: 'nvme' | 'sata' | 'cdrom' | 'usb'; serial: string }[];
  serialLog: string;
  mac: string;
  forwards: GuestForward[];
  /** Kernel parameters beyond the console ones; gets the host port that reaches the agent's 9999. */
  append?: (agentPort: number) => string;
  memoryMiB?: number;
  /** Virtual CPUs (default 1). */
  smp?: number;
  /** MACs of more virtio NICs, each on its own isolated user-mode network. */
  moreNics?: string[];
  /**
   * Virtio NICs on a wire of UDP datagrams on loopback (`-netdev socket,udp=`): each Ethernet frame the host
   * sends to 127.0.0.1:`hostToGuestPort` arrives on the NIC as it was sent, raw (LLDP, which user-mode networking
   * cannot carry in); the guest's frames go to 127.0.0.1:`guestToHostPort`. After `moreNics`.
   */
  wireNics?: (WireEnds & { mac: string })[];
  /**
   * The first NIC (`mac`, user-mode networking) also on such a wire: a QEMU hub joins both, so the NIC that
   * reaches the host's services also hears the frames sent to `hostToGuestPort`, as a server's PXE NIC hears the
   * switch it is cabled to. The guest's frames go to both.
   */
  bootWire?: WireEnds;
  /** NVMe disks: a raw file each, with the controller's serial number. */
  nvme?: { file: string; serial: string }[];
  /** `-smbios` values, e.g. `type=1,manufacturer=…,product=…,serial=…`. */
  smbios?: string[];
  /** Boot through UEFI firmware (OVMF) instead of SeaBIOS: its code, and a writable copy of its variable store. */
  uefi?: { code: string; vars: string };
  /**
   * One SAN LUN seen over several paths: a virtio-scsi controller with one `scsi-hd` per path, all on the same
   * backing file with the same serial and WWN (file locking off, shared writes allowed, as QEMU needs for that).
   */
  multipathLun?: { file: string; serial: string; wwn: string; paths: number };
  /** Forward a free loopback port to the guest's SSH port 22 (`Vm.sshPort`). */
  ssh?: boolean;
}

/** The host's ends of a NIC's UDP wire (`-netdev socket,udp=`), both on 127.0.0.1. */
export interface WireEnds {
  hostToGuestPort: number;
  guestToHostPort: number;
}

export interface Vm {
  agentPort: number;
  /** The loopback port that reaches the guest's port 22, when `ssh` was asked for. */
  sshPort?: number;
  accel: 'kvm' | 'tcg';
  startedAt: number;
  /** Resolves with QEMU's exit code when the VM powers off (or QEMU fails). */
  exited: Promise<number | null>;
  /** Everything the serial console printed so far. */
  serial(): string;
  /** Types on the serial console. */
  type(text: string): Promise<void>;
  /** Runs a QMP command (`device_add`, …) on QEMU; resolves with its return value, rejects with its error. */
  qmp(command: string, args?: Record<string, unknown>): Promise<unknown>;
  stderr(): string;
  kill(): Promise<void>;
}

export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((resolve) => s.listen(0, '127.0.0.1', resolve));
  const { port } = s.address() as AddressInfo;
  await new Promise<void>((resolve) => s.close(() => resolve()));
  return port;
}

export function accelerator(): 'kvm' | 'tcg' {
  const realKvm = existsSync('/sys/module/kvm_intel') || existsSync('/sys/module/kvm_amd');
  return realKvm && existsSync('/dev/kvm') ? 'kvm' : 'tcg';
}

export function randomMac(): string {
  const b = Array.from({ length: 3 }, () =>
    Math.floor(Math.random() * 256)
      .toString(16)
      .padStart(2, '0'),
  );
  return `52:54:00:${b.join(':')}`;
}

export async function startVm(o: VmOptions): Promise<Vm> {
  const agentPort = await freePort();
  const sshPort = o.ssh ? await freePort() : undefined;
  const accel = accelerator();
  // The uncompressed kernel boots by its PVH entry and skips the decompressor: seconds under TCG. UEFI
  // firmware starts the kernel as an EFI application, which only the compressed image is.
  const kernel = !o.uefi && existsSync(join(OUT, 'vmlinux')) ? join(OUT, 'vmlinux') : join(OUT, 'vmlinuz');
  const netdev = [
    'user,id=n0,restrict=on',
    `hostfwd=tcp:127.0.0.1:${agentPort}-:9999`,
    ...(sshPort ? [`hostfwd=tcp:127.0.0.1:${sshPort}-:22`] : []),
    ...o.forwards.map(
      (f) => `guestfwd=tcp:${HOST_IN_GUEST}:${f.guestPort}-cmd:${process.execPath} ${CONNECTOR} ${f.hostPort}`,
    ),
  ].join(',');
  const kernelBoot = (o.boot ?? 'kernel') === 'kernel';
  const virtio = [
    ...[...(o.disk ? [o.disk] : []), ...(o.moreDisks ?? [])].map((file, i) => ({
      file,
      serial: `E2EDISK${i}`,
      addr: '',
    })),
    ...(o.slottedDisks ?? []).map((d) => ({
      file: d.file,
      serial: d.serial,
      addr: `,addr=0x${d.pciSlot.toString(16)}`,
    })),
  ];
  const args = [
    '-accel',
    accel,
    '-cpu',
    accel === 'kvm' ? 'host' : 'max',
    '-m',
    String(o.memoryMiB ?? 1536),
    '-smp',
    String(o.smp ?? 1),
    '-nographic',
    '-no-reboot',
    '-monitor',
    'none',
    '-qmp',
    `unix:${o.serialLog}.qmp,server=on,wait=off`,
    '-chardev',
    `socket,id=s0,path=${o.serialLog}.sock,server=on,wait=off,logfile=${o.serialLog}`,
    '-serial',
    'chardev:s0',
    ...(kernelBoot
      ? [
          '-kernel',
          kernel,
          '-initrd',
          join(OUT, 'initramfs.img'),
          '-append',
          // The suite's disks are small (64 MiB and up), below the 4 GiB a disk needs to end IPA's start-up wait
          // for a root device: one look instead of ten, 3 s apart, at every agent start (test/disk/wait.test.ts).
          `console=ttyS0 panic=-1 quiet loglevel=3 ipa-disk-wait-attempts=1 ${o.append?.(agentPort) ?? ''}`,
        ]
      : []),
    ...virtio.flatMap((d, i) => [
      '-drive',
      `file=${d.file},if=none,id=d${i},format=raw,cache=unsafe`,
      '-device',
      `virtio-blk-pci,drive=d${i},serial=${d.serial}${d.addr}`,
    ]),
    ...otherDisks(o.otherDisks ?? []),
    ...multipathLun(o.multipathLun),
    ...bootNic(netdev, o.mac, o.bootWire),
    // Each on a subnet of its own: the guest must route to HOST_IN_GUEST through the first NIC.
    ...(o.moreNics ?? []).flatMap((mac, i) => [
      '-netdev',
      `user,id=n${i + 1},restrict=on,net=10.0.${3 + i}.0/24`,
      '-device',
      `virtio-net-pci,netdev=n${i + 1},mac=${mac},romfile=`,
    ]),
    ...(o.wireNics ?? []).flatMap((n, i) => [
      '-netdev',
      wire(`w${i}`, n),
      '-device',
      `virtio-net-pci,netdev=w${i},mac=${n.mac},romfile=`,
    ]),
    ...(o.nvme ?? []).flatMap((d, i) => [
      '-drive',
      `file=${d.file},if=none,id=nv${i},format=raw,cache=unsafe`,
      '-device',
      `nvme,drive=nv${i},serial=${d.serial}`,
    ]),
    ...(o.smbios ?? []).flatMap((v) => ['-smbios', v]),
    ...(o.uefi
      ? [
          '-drive',
          `if=pflash,format=raw,readonly=on,file=${o.uefi.code}`,
          '-drive',
          `if=pflash,format=raw,file=${o.uefi.vars}`,
        ]
      : []),
  ];
  const startedAt = Date.now();
  const proc = spawn('qemu-system-x86_64', args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => {
    proc.on('exit', (code) => resolve(code));
    proc.on('error', (err) => {
      stderr += String(err);
      resolve(null);
    });
  });
  let tty: Promise<Socket> | undefined;
  const ttySocket = () =>
    (tty ??= until(
      'the serial socket',
      async () => {
        const sock = connect(`${o.serialLog}.sock`);
        await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
        sock.on('data', () => undefined);
        return sock;
      },
      10_000,
      50,
    ));
  void exited.then(async () => (await tty?.catch(() => undefined))?.destroy());
  // Connected from the start, so the console sees a reader (the log file records everything anyway).
  void ttySocket().catch(() => undefined);
  return {
    agentPort,
    sshPort,
    accel,
    startedAt,
    exited,
    serial: () => (existsSync(o.serialLog) ? readFileSync(o.serialLog, 'latin1') : ''),
    type: async (text) => {
      const sock = await ttySocket();
      await new Promise<void>((resolve, reject) => sock.write(text, (err) => (err ? reject(err) : resolve())));
    },
    qmp: async (command, args) => {
      const sock = connect(`${o.serialLog}.qmp`);
      const lines: unknown[] = [];
      let buffered = '';
      let wake = () => {};
      sock.on('data', (d) => {
        buffered += d.toString('utf8');
        for (let nl = buffered.indexOf('\n'); nl >= 0; nl = buffered.indexOf('\n')) {
          lines.push(JSON.parse(buffered.slice(0, nl)));
          buffered = buffered.slice(nl + 1);
        }
        wake();
      });
      const reply = async (): Promise<Record<string, unknown>> => {
        for (;;) {
          const r = lines.shift() as Record<string, unknown> | undefined;
          if (r && ('return' in r || 'error' in r || 'QMP' in r)) return r;
          if (!r) await new Promise<void>((resolve) => (wake = resolve));
        }
      };
      try {
        await new Promise<void>((resolve, reject) => sock.once('connect', resolve).once('error', reject));
        await reply();
        sock.write(`${JSON.stringify({ execute: 'qmp_capabilities' })}\n`);
        await reply();
        sock.write(`${JSON.stringify({ execute: command, arguments: args })}\n`);
        const r = await reply();
        if ('error' in r) throw new Error(`QMP ${command}: ${JSON.stringify(r.error)}`);
        return r.return;
      } finally {
        sock.destroy();
      }
    },
    stderr: () => stderr,
    kill: async () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL');
      await exited;
    },
  };
}

function wire(id: string, ends: WireEnds): string {
  return `socket,id=${id},udp=127.0.0.1:${ends.guestToHostPort},localaddr=127.0.0.1:${ends.hostToGuestPort}`;
}

function bootNic(netdev: string, mac: string, ends: WireEnds | undefined): string[] {
  const nic = (id: string) => ['-device', `virtio-net-pci,netdev=${id},mac=${mac},romfile=`];
  if (!ends) return ['-netdev', netdev, ...nic('n0')];
  // hub 0: one port for user-mode networking, one for the wire, one for the NIC; a hub repeats every frame to
  // all its other ports
  return [
    '-netdev',
    netdev,
    '-netdev',
    wire('bw', ends),
    '-netdev',
    'hubport,id=h0,hubid=0,netdev=n0',
    '-netdev',
    'hubport,id=h1,hubid=0,netdev=bw',
    '-netdev',
    'hubport,id=h2,hubid=0',
    ...nic('h2'),
  ];
}

function otherDisks(disks: NonNullable<VmOptions['otherDisks']>): string[] {
  const args = disks.some((d) => d.bus === 'sata' || d.bus === 'cdrom') ? ['-device', 'ahci,id=ahci0'] : [];
  if (disks.some((d) => d.bus === 'usb')) args.push('-device', 'qemu-xhci,id=xhci0');
  let port = 0;
  disks.forEach((d, i) => {
    if (d.bus === 'usb') {
      args.push('-drive', `file=${d.file},if=none,id=o${i},format=raw`);
      args.push('-device', `usb-storage,bus=xhci0.0,drive=o${i},removable=on,serial=${d.serial}`);
      return;
    }
    if (d.bus === 'cdrom') {
      args.push('-drive', `file=${d.file},if=none,id=o${i},format=raw,media=cdrom,readonly=on`);
      args.push('-device', `ide-cd,drive=o${i},bus=ahci0.${port++},serial=${d.serial}`);
      return;
    }
    // discard=unmap: the guest's discards punch holes in the file, as TRIM would free flash.
    args.push('-drive', `file=${d.file},if=none,id=o${i},format=raw,cache=unsafe,discard=unmap`);
    if (d.bus === 'nvme') args.push('-device', `nvme,drive=o${i},serial=${d.serial}`);
    else args.push('-device', `ide-hd,drive=o${i},bus=ahci0.${port++},serial=${d.serial}`);
  });
  return args;
}

function multipathLun(lun: VmOptions['multipathLun']): string[] {
  if (!lun) return [];
  const args = ['-device', 'virtio-scsi-pci,id=mpscsi'];
  for (let i = 0; i < lun.paths; i++) {
    args.push('-drive', `file=${lun.file},if=none,id=mp${i},format=raw,cache=unsafe,file.locking=off`);
    args.push(
      '-device',
      `scsi-hd,drive=mp${i},bus=mpscsi.0,channel=0,scsi-id=${i},lun=0,serial=${lun.serial},wwn=${lun.wwn},share-rw=on`,
    );
  }
  return args;
}

export { until };

/**
 * Waits until an instance's console shows `marker` (a cloud-init bootcmd's echo) and cloud-init's end, for up to 15
 * minutes under TCG; the console so far.
 */
export function untilCloudInit(v: Vm, marker: string, label: string): Promise<string> {
  return until(
    `cloud-init's marker and its end on the instance's console (${label})`,
    () => {
      const s = v.serial();
      return s.includes(marker) && /Cloud-init v\. \S+ finished/.test(s) ? s : undefined;
    },
    900_000,
    2000,
  );
}
