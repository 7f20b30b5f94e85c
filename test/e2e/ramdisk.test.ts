// The built ramdisk, booted in QEMU: the agent answers through hostfwd, the serial console shows the
// status screen, a conductor stand-in drives a whole deploy (lookup, heartbeat, write_image with a
// config drive, power off), and the disk file holds the image and a config-2 partition afterwards. Booted
// through UEFI firmware (OVMF), install_bootloader registers the disk's loader in the firmware's variables.
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, readFile, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { buildIso, toWire } from '../helpers/configdrive.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { readDevice } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { compress, makeDiskImage, toQcow2, workDir } from '../helpers/make-image.ts';
import { agentCommand, agentStatus } from './agent-api.ts';
import { HOST_IN_GUEST, OUT, randomMac, startVm, until, type Vm } from './vm.ts';

const CONDUCTOR_PORT = 6385;
const IMAGES_PORT = 8080;
const MiB = 1024 * 1024;

let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm | undefined;
let conductor: FakeConductor | undefined;
let images: ImageServer | undefined;
/** Each boot's serial output is kept as image-build/out/e2e-serial-<n>.log, in test order. */
let bootCount = 0;

beforeEach(async () => {
  work = await workDir('ina-e2e-');
});

afterEach(async () => {
  if (vm) {
    await vm.kill();
    const serial = vm.serial();
    if (serial) await writeFile(join(OUT, `e2e-serial-${++bootCount}.log`), serial);
  }
  await conductor?.close();
  await images?.close();
  await work.cleanup();
  vm = conductor = images = undefined;
});

async function sparseDisk(name: string, bytes: number): Promise<string> {
  const path = join(work.dir, name);
  await writeFile(path, '');
  await truncate(path, bytes);
  return path;
}

/** Partitions of a GPT disk file as sgdisk prints them: number, first and last sector. */
async function partitions(disk: string): Promise<{ number: number; start: number; end: number }[]> {
  const { stdout } = await execa('sgdisk', ['-p', disk]);
  return [...stdout.matchAll(/^\s+(\d+)\s+(\d+)\s+(\d+)\s/gm)].map((m) => ({
    number: Number(m[1]),
    start: Number(m[2]),
    end: Number(m[3]),
  }));
}

function report(line: string): void {
  process.stdout.write(`[e2e] ${line}\n`);
}

/** QEMU's exit code once the VM powers off, or 'still running' after `ms`. */
function exitWithin(v: Vm, ms: number): Promise<number | null | string> {
  return Promise.race([v.exited, new Promise<string>((r) => setTimeout(() => r('still running'), ms))]);
}

async function manifestSize(): Promise<string> {
  const m = JSON.parse(await readFile(join(OUT, 'manifest.json'), 'utf8')) as {
    initramfs: { bytes: number; uncompressed_bytes: number };
  };
  return `${(m.initramfs.bytes / MiB).toFixed(1)} MiB zstd (${(m.initramfs.uncompressed_bytes / MiB).toFixed(1)} MiB unpacked)`;
}

describe('the ramdisk under QEMU', () => {
  it('boots standalone with ipa-debug and ina-console-shell: the API answers through hostfwd, the console shows its pages, the agent log and a shell, init restarts a killed agent, the system logs are collected, erase_devices_metadata clears the disk, power_off stops the VM', async () => {
    // A disk with a label and a filesystem, for the ramdisk's own cleaning to erase.
    const disk = await sparseDisk('vda.img', 64 * MiB);
    await execa('sgdisk', ['-n', '1:2048:+16M', '-t', '1:8300', disk]);
    await execa('mkfs.vfat', ['--offset', '2048', disk, String(16 * 1024)]);
    vm = await startVm({
      disk,
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: [],
      append: () => 'standalone=1 ipa-debug=1 ina-console-shell=1',
    });
    const v = vm;
    const getStatus = () => agentStatus(v);
    const status = await until('GET /v1/status', getStatus, 120_000);
    report(
      `standalone boot -> GET /v1/status 200 in ${((Date.now() - v.startedAt) / 1000).toFixed(1)} s (${v.accel}); initramfs ${await manifestSize()}`,
    );
    expect(status.version).toMatch(/^\d+\.\d+\.\d+/);

    const seen = (re: RegExp, from = 0) =>
      until(`${re} on the console`, async () => (re.test(v.serial().slice(from)) ? true : undefined), 60_000);
    // A whole screen, up to its key line (the console writes each screen at once, but the log file
    // may hold only part of the latest one when it is read).
    await seen(/Agent\s+serving[\s\S]*\[l\] full log {2}\[c\] commands {2}\[s\] shell/);
    await seen(/\{"level":30,[^\n]*"msg":"agent API listening"/);
    // Waited for, not read off one screen: under TCG the serial line has been seen to double a character once
    // (`Diskks`, CI run of 2026-12-06), and the next redraw, a second later, shows the screen as drawn.
    await seen(/Conductor\s+\(none: standalone\)/);
    await seen(/Disks\s+vda 64\.0 MiB disk/);
    const screen = v.serial();
    // The address comes with the DHCP lease, which may be a redraw later than the agent's start under TCG.
    await seen(/Network\s+eth0 52:54:00:[0-9a-f:]{8} 10\.0\.2\.15\/24/);
    expect(screen).toContain('[l] full log  [c] commands  [s] shell');
    // ipa-debug: the agent's own log lines go to the console too.
    expect(screen).toMatch(/\{"level":30,[^\n]*"msg":"agent API listening"/);

    let mark = v.serial().length;
    await v.type('l');
    await seen(/Agent log \(lines \d+-\d+ of \d+\)[\s\S]*agent API listening/, mark);
    mark = v.serial().length;
    await v.type('c');
    await seen(/Commands \(lines 1-1 of 1\)[\s\S]*no commands yet/, mark);
    await v.type('q');

    // The shell: prove it runs commands, then kill the agent from it; busybox init must start it again.
    mark = v.serial().length;
    await v.type('s');
    await seen(/\[console\] shell/, mark);
    await v.type('echo shell-$((6*7))\r');
    await seen(/shell-42/, mark);
    await v.type(
      // biome-ignore lint/suspicious/noTemplateCurlyInString: a shell parameter expansion typed into the VM
      'for p in /proc/[0-9]*; do grep -q agent.cjs $p/cmdline 2>/dev/null && kill ${p#/proc/}; done; exit\r',
    );
    const again = await until(
      'the restarted agent',
      async () => {
        const s = await getStatus();
        return s && s.started_at > status.started_at ? s : undefined;
      },
      120_000,
    );
    expect(again.version).toBe(status.version);
    await seen(/Agent\s+serving, up [^,]+, restarted 1x/, mark);

    // The logs a conductor collects, made by the ramdisk's own tools (busybox tar, dmesg, ip; util-linux lsblk).
    const logs = await agentCommand(v, 'log.collect_system_logs');
    expect(logs.command_status).toBe('SUCCEEDED');
    const archive = Buffer.from(logs.command_result!.system_logs!, 'base64');
    const member = async (name: string) => (await execa('tar', ['-xzOf', '-', `./${name}`], { input: archive })).stdout;
    expect(await member('agent.log')).toContain('agent API listening');
    expect(await member('dmesg')).toMatch(/Linux version/);
    expect(await member('lsblk-json')).toContain('"name": "vda"');
    expect(await member('ip_addr')).toMatch(/eth0[\s\S]*10\.0\.2\.15/);
    // pstore is mounted, so that erase_pstore finds the firmware's crash records (it reads /proc/mounts).
    expect(await member('mounts')).toMatch(/^pstore \/sys\/fs\/pstore pstore /m);

    // The suite's plugin (test/e2e/hardware-managers), baked in by image-build as an operator's would be: listed
    // under its manager with its args, and run by busybox sh with its args on stdin, its output in the agent log.
    const listed = await agentCommand(v, 'clean.get_clean_steps', {
      node: { uuid: 'e2e-standalone', properties: {}, instance_info: {}, driver_internal_info: {} },
      ports: [],
    });
    expect(listed.command_status).toBe('SUCCEEDED');
    const steps = listed.command_result as unknown as {
      clean_steps: Record<string, { step: string; priority: number; argsinfo: Record<string, unknown> }[]>;
      hardware_manager_version: Record<string, string>;
    };
    expect(steps.clean_steps.E2eProbeManager?.map((x) => [x.step, x.priority])).toEqual([['e2e_probe', 0]]);
    expect(steps.clean_steps.E2eProbeManager?.[0]?.argsinfo).toHaveProperty('word');
    expect(steps.hardware_manager_version).toMatchObject({ ina_e2e: '1.0' });
    mark = v.serial().length;
    const probed = await agentCommand(v, 'clean.execute_clean_step', {
      step: { step: 'e2e_probe', priority: 0, interface: 'deploy', args: { word: 'baked-in' } },
      node: { uuid: 'e2e-standalone', properties: {}, instance_info: {}, driver_internal_info: {} },
      ports: [],
      clean_version: steps.hardware_manager_version,
    });
    expect(probed.command_error).toBeNull();
    expect(probed.command_status).toBe('SUCCEEDED');
    await seen(/e2e probe says baked-in for node e2e-standalone/, mark);

    // Cleaning with the ramdisk's wipefs, sgdisk and dd, as a conductor asks for it.
    const cleaned = await agentCommand(v, 'clean.execute_clean_step', {
      step: {
        step: 'erase_devices_metadata',
        priority: 99,
        interface: 'deploy',
        reboot_requested: false,
        abortable: true,
      },
      node: { uuid: 'e2e-standalone', properties: {}, instance_info: {}, driver_internal_info: {} },
      ports: [],
      clean_version: {},
    });
    expect(cleaned.command_error).toBeNull();
    expect(cleaned.command_status).toBe('SUCCEEDED');

    expect((await agentCommand(v, 'standby.power_off')).command_status).toBe('SUCCEEDED');
    expect(await exitWithin(v, 60_000), v.stderr()).toBe(0);
    expect((await execa('wipefs', ['-n', '--noheadings', disk])).stdout.trim()).toBe('');
    expect((await readDevice(disk, 0, MiB)).every((b) => b === 0)).toBe(true);
    // The old partition's filesystem is gone too, not just the table that pointed at it.
    expect((await execa('blkid', ['-p', '-O', String(MiB), disk], { reject: false })).exitCode).toBe(2);
  });

  it('rescue: after finalize_rescue the rescue user logs in as root with the password given to Ironic, on the serial console and over SSH (not before), and the DHCP clients go back to their server for the tenant network', async () => {
    vm = await startVm({
      disk: await sparseDisk('vda.img', 64 * MiB),
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: [],
      append: () => 'standalone=1',
      ssh: true,
    });
    const v = vm;
    await until('GET /v1/status', () => agentStatus(v), 120_000);
    const seen = (re: RegExp, from: number) =>
      until(`${re} on the console`, async () => (re.test(v.serial().slice(from)) ? true : undefined), 60_000);
    // dropbear's client, the password from the environment; no host key to check (a fresh one each boot).
    const ssh = (user: string, password: string) =>
      execa(
        'dbclient',
        ['-y', '-y', '-p', String(v.sshPort), `${user}@127.0.0.1`, 'echo "I am $LOGNAME, uid $(id -u)"'],
        {
          env: { DROPBEAR_PASSWORD: password },
          reject: false,
          timeout: 90_000,
        },
      );
    // A deploy ramdisk takes no logins, and without sshkey/rootpwd nothing listens on port 22: the user-mode
    // network accepts the forwarded connection and closes it as the guest refuses it, before any SSH banner (a
    // server refusing the login would say so after one).
    const early = await ssh('rescue', 'correct horse');
    expect(early.exitCode).not.toBe(0);
    expect(early.stdout).toBe('');
    expect(early.stderr).toMatch(/exited: (Remote closed the connection|Connect failed: Connection refused)$/m);
    // Ironic sends the password crypt(3)-hashed (SHA-512), as `openssl passwd -6` makes it.
    const hash = (await execa('openssl', ['passwd', '-6', '-salt', 'e2erescue', 'correct horse'])).stdout.trim();
    let mark = v.serial().length;
    const r = await agentCommand(v, 'rescue.finalize_rescue', { rescue_password: hash, hashed: true });
    expect(r.command_status).toBe('SUCCEEDED');
    await seen(/login: $/, mark);
    // A wrong password is refused, the right one gives the rescue user a shell.
    mark = v.serial().length;
    await v.type('rescue\r');
    await seen(/Password: $/, mark);
    await v.type('wrong horse\r');
    await seen(/Login incorrect/, mark);
    await seen(/login: $/, mark);
    mark = v.serial().length;
    await v.type('rescue\r');
    await seen(/Password: $/, mark);
    await v.type('correct horse\r');
    await new Promise((res) => setTimeout(res, 1000));
    await v.type('echo "I am $LOGNAME, uid $(id -u), $((6*7))"\r');
    await seen(/I am rescue, uid 0, 42/, mark);
    // Ironic now moves the ports to the tenant network: every DHCP client is sent back to the server (here the
    // same one, which renews; on a moved port the renewal goes unanswered and discovery starts over).
    await v.type('sleep 7; dmesg | grep -o "ina: \\(rescue: DHCP renewal\\|DHCP [a-z]* on eth0\\)" | tail -n 6\r');
    await seen(/ina: rescue: DHCP renewal\s+ina: DHCP (renew|deconfig|bound) on eth0/, mark);
    // Over the network, as the tenant reaches a rescued node: the wrong password and root are refused.
    const wrong = await ssh('rescue', 'wrong horse');
    expect(wrong.exitCode).not.toBe(0);
    expect(wrong.stdout).toBe('');
    for (const password of ['correct horse', '']) {
      const root = await ssh('root', password);
      expect(root.exitCode).not.toBe(0);
      expect(root.stdout).toBe('');
    }
    const right = await ssh('rescue', 'correct horse');
    expect(right.stderr).not.toMatch(/denied/i);
    expect(right.stdout.trim()).toBe('I am rescue, uid 0');
    // The agent no longer serves: rescue hands the machine over.
    await expect(agentStatus(v)).rejects.toThrow();
  });

  it('a NIC that appears after boot gets a DHCP client and a lease; lockdown: the reply arrives, then every NIC is down and no DHCP client, nor the watcher that starts them, is left', async () => {
    vm = await startVm({
      disk: await sparseDisk('vda.img', 64 * MiB),
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: [],
      append: () => 'standalone=1 ina-console-shell=1',
    });
    const v = vm;
    await until('GET /v1/status', () => agentStatus(v), 120_000);
    const seen = (re: RegExp, from: number) =>
      until(`${re} on the console`, async () => (re.test(v.serial().slice(from)) ? true : undefined), 60_000);
    await seen(/\[s\] shell/, 0);
    // Hot-plugged: to /init it is a NIC whose driver registered it long after the wait (mlx5 and ice take seconds).
    const plugged = v.serial().length;
    await v.qmp('netdev_add', { type: 'user', id: 'late', restrict: true });
    await v.qmp('device_add', { driver: 'virtio-net-pci', netdev: 'late', mac: randomMac(), id: 'late' });
    await seen(/eth1\s+\S+\s+10\.0\.2\.\d+\/24/, plugged);
    expect((await agentCommand(v, 'system.lockdown')).command_status).toBe('SUCCEEDED');
    await seen(/Agent\s+locked down/, 0);
    // The clients are stopped (and gone) before the NICs go down; the agent logs when it is done.
    await seen(/lockdown: network interfaces down/, 0);
    const mark = v.serial().length;
    await v.type('s');
    await seen(/\[console\] shell/, mark);
    await v.type(
      'echo "dhcp=$(pidof udhcpc || echo none) watcher=$(pidof dhcp-nics || echo none) $(for n in eth0 eth1; do echo $n=$(cat /sys/class/net/$n/operstate); done)"\r',
    );
    await seen(/dhcp=none watcher=none eth0=down\s+eth1=down/, mark);
    await expect(agentStatus(v)).rejects.toThrow();
  });

  /**
   * A virtual-media boot's devices as Ironic makes them (ironic/common/images.py): a small FAT image labelled
   * ir-vfd-dev whose parameters.txt has one key=value per line, and the boot ISO, labelled config-2 when it
   * carries openstack/ files (network_data.json), VMEDIA_BOOT_ISO otherwise; its etc/ironic-python-agent.d
   * sets the advertised port. Also a local disk with a config drive of its own (a former instance's), with
   * another address and an API URL that leads nowhere: not virtual media, so not to be taken.
   */
  async function virtualMedia(mac: string, networkData: boolean, pubId: string | undefined) {
    const address = (ip: string) => ({
      links: [{ id: 'port0', type: 'phy', ethernet_mac_address: mac }],
      networks: [
        {
          id: 'net0',
          type: 'ipv4',
          link: 'port0',
          ip_address: ip,
          netmask: '255.255.255.0',
          routes: [{ network: '0.0.0.0', netmask: '0.0.0.0', gateway: '10.0.2.2' }],
        },
      ],
    });
    const vfd = join(work.dir, 'vfd.img');
    await execa('mkfs.vfat', ['-n', 'ir-vfd-dev', '-C', vfd, '1440']);
    const params = join(work.dir, 'parameters.txt');
    await writeFile(
      params,
      `ipa-api-url=http://${HOST_IN_GUEST}:${CONDUCTOR_PORT}\nBOOTIF=${mac}\nboot_method=vmedia\nina-console-shell=1`,
    );
    await execa('mcopy', ['-i', vfd, params, '::parameters.txt']);
    const tree = join(work.dir, 'iso');
    await mkdir(join(tree, 'etc', 'ironic-python-agent.d'), { recursive: true });
    await writeFile(join(tree, 'etc', 'ironic-python-agent.d', 'e2e.conf'), '[DEFAULT]\nadvertise_port = 9876\n');
    if (networkData) {
      await mkdir(join(tree, 'openstack', 'latest'), { recursive: true });
      await writeFile(join(tree, 'openstack', 'latest', 'network_data.json'), JSON.stringify(address('10.0.2.50')));
    }
    const iso = join(work.dir, 'boot.iso');
    const label = networkData ? 'config-2' : 'VMEDIA_BOOT_ISO';
    const publisher = pubId ? ['-publisher', pubId] : [];
    await execa('genisoimage', ['-quiet', '-V', label, ...publisher, '-r', '-J', '-o', iso, tree]);
    const local = join(work.dir, 'vda.img');
    await execa('mkfs.vfat', ['-n', 'config-2', '-C', local, '8192']);
    await writeFile(join(work.dir, 'local.json'), JSON.stringify(address('10.0.2.66')));
    await writeFile(join(work.dir, 'local.conf'), '[DEFAULT]\napi_url = http://10.0.2.66:1\n');
    await execa('mmd', ['-i', local, '::openstack', '::openstack/latest', '::etc', '::etc/ironic-python-agent.d']);
    await execa('mcopy', ['-i', local, join(work.dir, 'local.json'), '::openstack/latest/network_data.json']);
    await execa('mcopy', ['-i', local, join(work.dir, 'local.conf'), '::etc/ironic-python-agent.d/ironic.conf']);
    return {
      disk: local,
      otherDisks: [
        { file: vfd, bus: 'usb' as const, serial: 'VFD' },
        { file: iso, bus: 'cdrom' as const, serial: 'CD' },
      ],
    };
  }

  /**
   * Boots with `boot_method=vmedia` and BOOTIF on the kernel command line (and `ir_pub_id`, as Ironic 39 adds it,
   * when given); the first accepted heartbeat's callback URL.
   */
  async function bootVirtualMedia(networkData: boolean, pubId?: string): Promise<string> {
    const mac = randomMac();
    conductor = await FakeConductor.start();
    conductor.addNode({ macs: [mac] });
    vm = await startVm({
      ...(await virtualMedia(mac, networkData, pubId)),
      serialLog: join(work.dir, 'serial.log'),
      mac,
      forwards: [{ guestPort: CONDUCTOR_PORT, hostPort: Number(new URL(conductor.url).port) }],
      append: () => `boot_method=vmedia BOOTIF=01-${mac.replaceAll(':', '-')}${pubId ? ` ir_pub_id=${pubId}` : ''}`,
    });
    const c = conductor;
    await c.waitFor(() => c.heartbeats.some((h) => h.status === 202), 'a heartbeat', 180_000);
    return (c.heartbeats.find((h) => h.status === 202)!.body as { callback_url: string }).callback_url;
  }

  it("virtual media without DHCP: the parameters.txt of ir-vfd-dev find the conductor and turn on the console shell, the boot ISO's IPA configuration sets the advertised port, and its network_data.json the static address, with no DHCP client", async () => {
    // The address is the route's source towards the conductor: network_data's, not a lease's.
    expect(await bootVirtualMedia(true, randomUUID())).toBe('https://10.0.2.50:9876');
    const v = vm!;
    const seen = (re: RegExp, from: number) =>
      until(`${re} on the console`, async () => (re.test(v.serial().slice(from)) ? true : undefined), 60_000);
    await seen(/\[s\] shell/, 0);
    const mark = v.serial().length;
    await v.type('s');
    await seen(/\[console\] shell/, mark);
    await v.type(
      "echo \"addrs=$(ip -4 -o addr show dev eth0 | awk '{print $4}' | tr '\\n' ,) dhcp=$(pidof udhcpc || echo none)\"\r",
    );
    await seen(/addrs=10\.0\.2\.50\/24, dhcp=none/, mark);
  });

  it('virtual media: a config drive on a local disk is not taken for the boot ISO; its network and IPA configuration are ignored, and the ISO (VMEDIA_BOOT_ISO, no network_data) leaves the NIC to DHCP', async () => {
    // The local disk is the only config-2 device here: taken, its api_url would lead nowhere and its address
    // would be 10.0.2.66. QEMU's DHCP hands out 10.0.2.15. No ir_pub_id (Ironic 21.4 sends none): the device's
    // kind alone must keep the local disk out.
    expect(await bootVirtualMedia(false)).toBe('https://10.0.2.15:9876');
  });

  it('deploys from a conductor: lookup, heartbeat, write_image of a qcow2 to a hinted second disk, of a gzip image streamed to a third and buffered to a fourth, and of a raw image with a config drive to the first, power off; the disk files hold them', async () => {
    const mac = randomMac();
    conductor = await FakeConductor.start();
    const node = conductor.addNode({ macs: [mac] });
    images = await startImageServer();
    const img = await makeDiskImage(work.dir, { sizeMiB: 8, table: 'gpt' });
    const imageUrl = new URL(await images.serveFile('disk.raw', img.path));
    const guestUrl = `http://${HOST_IN_GUEST}:${IMAGES_PORT}${imageUrl.pathname}`;
    const raw = await readFile(img.path);
    const iso = await buildIso();
    const disk = await sparseDisk('vda.img', 5 * 1024 * MiB);
    // The buffered path in the ramdisk: tmpfs buffer, the hash from the file, qemu-img onto the device.
    const second = await makeDiskImage(work.dir, { sizeMiB: 8, table: 'mbr', name: 'second.raw' });
    const qcow2 = await toQcow2(second.path);
    const qcow2Url = new URL(await images.serveFile('second.qcow2', qcow2));
    const secondDisk = await sparseDisk('vdb.img', 5 * 1024 * MiB);
    // The stream path for compressed images in the ramdisk: pigz into dd.
    const third = await makeDiskImage(work.dir, { sizeMiB: 8, table: 'gpt', name: 'third.raw' });
    const packed = await compress(third.path, 'gzip');
    const packedUrl = new URL(await images.serveFile('third.raw.gz', packed));
    const thirdDisk = await sparseDisk('vdc.img', 64 * MiB);
    // The same image buffered: pigz under prlimit writes the tmpfs buffer file.
    const fourthDisk = await sparseDisk('vdd.img', 64 * MiB);

    vm = await startVm({
      disk,
      moreDisks: [secondDisk, thirdDisk, fourthDisk],
      serialLog: join(work.dir, 'serial.log'),
      mac,
      forwards: [
        { guestPort: CONDUCTOR_PORT, hostPort: Number(new URL(conductor.url).port) },
        { guestPort: IMAGES_PORT, hostPort: Number(imageUrl.port) },
      ],
      append: (port) =>
        `ipa-api-url=http://${HOST_IN_GUEST}:${CONDUCTOR_PORT} ipa-advertise-host=127.0.0.1 ipa-advertise-port=${port}`,
    });
    const v = vm;
    const c = conductor;
    await c.waitFor(() => c.heartbeats.some((h) => h.status === 202), 'a heartbeat', 180_000);
    const firstBeat = c.heartbeats.find((h) => h.status === 202)!;
    report(
      `boot -> first heartbeat ${((firstBeat.at - v.startedAt) / 1000).toFixed(1)} s (${v.accel}); initramfs ${await manifestSize()}`,
    );
    expect(c.lookups.length).toBeGreaterThan(0);

    const agent = c.clientFor(node.uuid, { pollIntervalMs: 1000, pollAttempts: 300 });
    // As Ironic does: the managers' versions come from the steps listing (the ramdisk carries the suite's plugin
    // manager beside the generic one), and go back with every step.
    const listing = await agent.command(
      'deploy.get_deploy_steps',
      {
        node: { uuid: node.uuid, properties: {}, instance_info: {}, driver_internal_info: {} },
        ports: [],
      },
      { wait: true },
    );
    const versions = (listing.command_result as unknown as { hardware_manager_version: Record<string, string> })
      .hardware_manager_version;
    expect(versions).toMatchObject({ generic_hardware_manager: '1.2', ina_e2e: '1.0' });
    const writeImage = async (args: Record<string, unknown>, properties: Record<string, unknown>) => {
      const started = await agent.command('deploy.execute_deploy_step', {
        step: { interface: 'deploy', step: 'write_image', priority: 80, reboot_requested: false, args },
        node: { uuid: node.uuid, properties, instance_info: {}, driver_internal_info: {} },
        ports: [],
        deploy_version: versions,
      });
      expect(started.command_status).toBe('RUNNING');
      const done = await agent.waitForCommand('deploy.execute_deploy_step');
      expect(done.command_error).toBeNull();
      expect(done.command_status).toBe('SUCCEEDED');
      return JSON.stringify(done.command_result);
    };
    const qcow2Info = {
      id: 'e2e-qcow2',
      urls: [`http://${HOST_IN_GUEST}:${IMAGES_PORT}${qcow2Url.pathname}`],
      disk_format: 'qcow2',
      container_format: 'bare',
      os_hash_algo: 'sha256',
      os_hash_value: createHash('sha256')
        .update(await readFile(qcow2))
        .digest('hex'),
    };
    expect(await writeImage({ image_info: qcow2Info }, { root_device: { name: '/dev/vdb' } })).toMatch(
      /written to device \/dev\/vdb/,
    );

    const gzipInfo = {
      id: 'e2e-gzip',
      urls: [`http://${HOST_IN_GUEST}:${IMAGES_PORT}${packedUrl.pathname}`],
      disk_format: 'raw',
      container_format: 'bare',
      stream_raw_images: true,
      os_hash_algo: 'sha256',
      os_hash_value: createHash('sha256')
        .update(await readFile(packed))
        .digest('hex'),
    };
    expect(await writeImage({ image_info: gzipInfo }, { root_device: { name: '/dev/vdc' } })).toMatch(
      /written to device \/dev\/vdc/,
    );
    const buffered = { ...gzipInfo, stream_raw_images: false };
    expect(await writeImage({ image_info: buffered }, { root_device: { name: '/dev/vdd' } })).toMatch(
      /written to device \/dev\/vdd/,
    );

    const rawInfo = {
      id: 'e2e-image',
      urls: [guestUrl],
      disk_format: 'raw',
      container_format: 'bare',
      stream_raw_images: true,
      os_hash_algo: 'sha256',
      os_hash_value: createHash('sha256').update(raw).digest('hex'),
    };
    expect(await writeImage({ image_info: rawInfo, configdrive: toWire(iso) }, {})).toMatch(
      /written to device \/dev\/vda/,
    );

    const screen = new RegExp(
      `Node\\s+${node.uuid}[\\s\\S]*Heartbeat\\s+\\d\\d:\\d\\d:\\d\\d \\([^)]+ ago\\) ok[\\s\\S]*\\[l\\] full log {2}\\[c\\] commands`,
    );
    await until(
      'the node and its heartbeat on the status screen',
      async () => (screen.test(v.serial()) ? true : undefined),
      60_000,
    );
    // A production boot: no shell key, and the agent's log stays off the console.
    expect(v.serial()).toContain('[l] full log  [c] commands');
    expect(v.serial()).not.toContain('[s] shell');
    expect(v.serial()).not.toMatch(/"msg":"command started"/);

    await agent.command('standby.power_off');
    expect(await exitWithin(v, 120_000), v.stderr()).toBe(0);

    const written = await readDevice(disk, img.partition.start, img.partition.end);
    expect(createHash('sha256').update(written).digest('hex')).toBe(
      createHash('sha256').update(raw.subarray(img.partition.start, img.partition.end)).digest('hex'),
    );
    const parts = await partitions(disk);
    expect(parts[0]).toMatchObject({ number: 1, start: img.partition.start / 512 });
    const labels = await Promise.all(
      parts.map(async (p) =>
        (await readDevice(disk, p.start * 512 + 0x8028, p.start * 512 + 0x8028 + 32)).toString('latin1').trim(),
      ),
    );
    expect(labels).toContain('config-2');
    const cd = parts[labels.indexOf('config-2')]!;
    expect(await readDevice(disk, cd.start * 512, cd.start * 512 + iso.length)).toEqual(iso);
    // The qcow2 converted onto the second disk: the same bytes as the raw image it was made from.
    expect((await readDevice(secondDisk, 0, second.sizeBytes)).equals(await readFile(second.path))).toBe(true);
    // The gzip image on the third and fourth disks: its partition's bytes (the table itself changed when its
    // backup moved to the disk's end).
    const { start, end } = third.partition;
    const thirdBytes = (await readFile(third.path)).subarray(start, end);
    expect((await readDevice(thirdDisk, start, end)).equals(thirdBytes)).toBe(true);
    expect((await readDevice(fourthDisk, start, end)).equals(thirdBytes)).toBe(true);
  });

  it("registers the disk's UEFI boot loader with the firmware when booted through OVMF (install_bootloader), and the entry survives in its variable store", async () => {
    // A GPT disk with an EFI system partition holding a vendor loader and the removable-media fallback.
    const disk = await sparseDisk('vda.img', 5 * 1024 * MiB);
    await execa('sgdisk', ['-n', '1:2048:+64M', '-t', '1:ef00', '-c', '1:EFI', '-n', '2:0:+64M', '-t', '2:8300', disk]);
    await execa('mkfs.vfat', ['-F', '16', '--offset', '2048', disk, String(64 * 1024)]);
    const esp = `${disk}@@${2048 * 512}`;
    await execa('mmd', ['-i', esp, '::/EFI', '::/EFI/BOOT', '::/EFI/debian']);
    for (const file of ['::/EFI/BOOT/BOOTX64.EFI', '::/EFI/debian/grubx64.efi']) {
      await execa('mcopy', ['-i', esp, '-', file], { input: 'not really a loader' });
    }
    const vars = join(work.dir, 'OVMF_VARS.fd');
    await writeFile(vars, await readFile('/usr/share/OVMF/OVMF_VARS_4M.fd'));
    vm = await startVm({
      disk,
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: [],
      append: () => 'standalone=1',
      uefi: { code: '/usr/share/OVMF/OVMF_CODE_4M.fd', vars },
    });
    const v = vm;
    await until('GET /v1/status', () => agentStatus(v), 240_000);
    report(
      `UEFI (OVMF) boot -> GET /v1/status 200 in ${((Date.now() - v.startedAt) / 1000).toFixed(1)} s (${v.accel})`,
    );

    const first = await agentCommand(v, 'image.install_bootloader', { target_boot_mode: 'uefi' });
    expect(first.command_error).toBeNull();
    const entry = /boot entries on \/dev\/vda partition 1: (.+) \(\\EFI\\debian\\grubx64\.efi\) registered/.exec(
      first.command_result!.result,
    );
    expect(entry, first.command_result!.result).not.toBeNull();
    // efibootmgr reads the firmware's entries back: the second run finds the first one's entry.
    const second = await agentCommand(v, 'image.install_bootloader', { target_boot_mode: 'uefi' });
    expect(second.command_result!.result).toContain(`${entry![1]} (\\EFI\\debian\\grubx64.efi) already registered`);

    expect((await agentCommand(v, 'standby.power_off')).command_status).toBe('SUCCEEDED');
    expect(await exitWithin(v, 60_000), v.stderr()).toBe(0);
    // The firmware kept the entry in its variable store: the label and the loader path, as UTF-16.
    const store = await readFile(vars);
    expect(store.includes(Buffer.from(entry![1]!, 'utf16le'))).toBe(true);
    expect(store.includes(Buffer.from('\\EFI\\debian\\grubx64.efi', 'utf16le'))).toBe(true);
  });
});
