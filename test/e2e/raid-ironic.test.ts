// Software RAID as Metal3 asks it of a real Ironic 39 (sid's conductor, raid_interface=agent), with the built
// ramdisk in QEMU (TCG) under OVMF on two virtio disks: target_raid_config set through the API (one RAID-1 of
// the whole disks, size MAX, as BMO sends it) and the manual clean BMO runs (raid.delete_configuration,
// deploy.erase_devices_metadata, raid.create_configuration); then a deploy of the Debian cloud image with a config
// drive, the RAID rebuilt by raid.apply_configuration from a deploy template (the node's trait); then the
// instance booted by the firmware from its disks, with the NVRAM the ramdisk's efibootmgr wrote, until cloud-init
// prints the config drive's marker: with both disks, with disk A removed, with disk B removed; then undeploy with
// metadata cleaning back to available.
// Power is fake-hardware's: the test is the power button (ironic-vm.ts). It boots the ramdisk VM when Ironic
// waits for an agent, the agent's standby.power_off ends it, and the instance boots are the test's own.
import { execFile } from 'node:child_process';
import { copyFile, open, symlink, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workDir } from '../helpers/make-image.ts';
import type { NodeView } from '../ironic/support/baremetal.ts';
import { startProxy, type Proxy as ForwardProxy } from '../helpers/image-server.ts';
import { startImageServer, type ImageServer } from '../ironic/support/image-server.ts';
import { StepChain } from '../ironic/support/step-chain.ts';
import { ensureSidChroot, sidUnavailable, startIronicForVm, type IronicForVm } from './ironic-vm.ts';
import { bytesAt } from './raid-vm.ts';
import { HOST_IN_GUEST, OUT, randomMac, startVm, until, untilCloudInit, type SlottedDisk, type Vm } from './vm.ts';

const run = promisify(execFile);
const repo = join(import.meta.dirname, '..', '..');
const S = 'software RAID (Ironic 39, QEMU)';
const MiB = 2 ** 20;
const GiB = 2 ** 30;
// Big enough for the array to be a root device without hints (IPA's 4 GiB floor) after the 551 MiB of ESP room.
const DISK_BYTES = 5 * GiB;
const TRAIT = 'CUSTOM_SOFTWARE_RAID1';
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';
// What BMO sends for `softwareRAIDVolumes: [{level: "1"}]` with no root device hints: size nil -> MAX, and the
// first volume marked as the root.
const TARGET = {
  logical_disks: [{ size_gb: 'MAX', raid_level: '1', controller: 'software', is_root_volume: true }],
};
const MD_MAGIC = Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]);
// The image server is on the host's loopback, where the conductor checks the URL; the guest reaches it through an
// HTTP proxy (driver_info image_http_proxy, sent to the agent as image_info proxies) at this port on HOST_IN_GUEST.
const PROXY_PORT_IN_GUEST = 3128;

let work: Awaited<ReturnType<typeof workDir>>;
let rig: IronicForVm | undefined;
let images: ImageServer | undefined;
let proxy: ForwardProxy | undefined;
let vm: Vm | undefined;
let diskA: SlottedDisk;
let diskB: SlottedDisk;
let vars: string;
let uuid: string;
const mac = randomMac();
const marker = `RAID-MARKER-${Math.random().toString(36).slice(2, 10)}`;
const chain = new StepChain();
const serials: string[] = [];
const started = Date.now();
const phases: [string, number][] = [];

function report(line: string): void {
  process.stdout.write(`[e2e raid-ironic] ${line}\n`);
}

/** Runs `body` and reports how long it took (the table at the end of the file). */
async function phase<T>(name: string, body: () => Promise<T>): Promise<T> {
  const t0 = Date.now();
  try {
    return await body();
  } finally {
    phases.push([name, Date.now() - t0]);
    report(`${name}: ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  }
}

interface RaidNode extends NodeView {
  power_state: string | null;
  raid_config: { logical_disks: unknown[]; last_updated: string };
  target_raid_config: Record<string, unknown>;
}

const unavailable = sidUnavailable();

beforeAll(async () => {
  if (unavailable) return;
  await ensureSidChroot();
  work = await workDir('ina-e2e-raid-ironic-');
  // The full loop's Debian cloud image (mdadm in its initramfs, GRUB with mdraid1x): cached, built when missing.
  report('the cloud image (scripts/fullloop/build-cloud-image.sh; cached, ~20 min when cold)');
  const image = (
    await run('bash', [join(repo, 'scripts/fullloop/build-cloud-image.sh')], { maxBuffer: 1 << 20 })
  ).stdout.trim();
  const imageSha256 = (await readText(`${image}.sha256`)).split(/\s+/)[0]!;
  await symlink(image, join(work.dir, 'instance.qcow2'));
  images = await startImageServer(work.dir);
  proxy = await startProxy();

  const disk = async (name: string, serial: string, pciSlot: number): Promise<SlottedDisk> => {
    const file = join(work.dir, `${name}.img`);
    await writeFile(file, '');
    await truncate(file, DISK_BYTES);
    return { file, serial, pciSlot };
  };
  diskA = await disk('disk-a', 'RAIDDISKA', 0x10);
  diskB = await disk('disk-b', 'RAIDDISKB', 0x11);
  vars = join(work.dir, 'OVMF_VARS.fd');
  await copyFile(OVMF_VARS, vars);

  rig = await phase('Ironic 39 up', () =>
    startIronicForVm({
      // Metadata cleaning only (a shred of two 5 GiB disks under TCG is erase's own suites' business); room for
      // install_bootloader's ESP array and copies under TCG.
      extraConf: '[deploy]\nerase_devices_priority = 0\n[agent]\ncommand_wait_attempts = 300\n',
    }),
  );
  uuid = await rig.enroll(
    {
      name: 'raid-ironic',
      driver: 'fake-hardware',
      deploy_interface: 'direct',
      boot_interface: 'fake',
      power_interface: 'fake',
      // `fake` management refuses boot device "disk", which prepare_instance_boot sets
      management_interface: 'noop',
      network_interface: 'noop',
      raid_interface: 'agent',
      properties: { cpu_arch: 'x86_64', capabilities: 'boot_mode:uefi' },
      driver_info: { image_http_proxy: `http://${HOST_IN_GUEST}:${PROXY_PORT_IN_GUEST}` },
    },
    [{ address: mac, pxe_enabled: true }],
  );
  imageInfo = { url: images.url('instance.qcow2'), sha256: imageSha256 };
}, 3_600_000);

let imageInfo: { url: string; sha256: string };

afterAll(async () => {
  if (vm) {
    await vm.kill();
    keepSerial(vm);
  }
  for (const [i, text] of serials.entries()) await writeFile(join(OUT, `e2e-serial-raid-ironic-${i}.log`), text);
  await rig?.stop();
  await images?.close();
  await proxy?.close();
  await work?.cleanup();
  for (const [name, ms] of phases) report(`${name.padEnd(60)} ${(ms / 1000).toFixed(1).padStart(7)} s`);
  report(`whole file took ${((Date.now() - started) / 1000).toFixed(1)} s`);
}, 120_000);

async function readText(file: string): Promise<string> {
  const fh = await open(file, 'r');
  try {
    return await fh.readFile('utf8');
  } finally {
    await fh.close();
  }
}

interface GptPartition {
  number: number;
  type: string;
  /** The partition's unique GUID, which a firmware boot entry's HD() node names. */
  guid: string;
  firstByte: number;
  lastByte: number;
  name: string;
}

/** The GPT partitions of a disk file, read as the firmware reads them (primary header, LBA 1). */
async function gpt(file: string): Promise<GptPartition[]> {
  const header = await bytesAt(file, 512, 92);
  if (header.subarray(0, 8).toString('latin1') !== 'EFI PART') return [];
  const entriesAt = Number(header.readBigUInt64LE(72)) * 512;
  const count = header.readUInt32LE(80);
  const size = header.readUInt32LE(84);
  const table = await bytesAt(file, entriesAt, count * size);
  const parts: GptPartition[] = [];
  for (let i = 0; i < count; i++) {
    const e = table.subarray(i * size, (i + 1) * size);
    if (e.subarray(0, 16).every((b) => b === 0)) continue;
    parts.push({
      number: i + 1,
      type: guid(e.subarray(0, 16)),
      guid: guid(e.subarray(16, 32)),
      firstByte: Number(e.readBigUInt64LE(32)) * 512,
      lastByte: Number(e.readBigUInt64LE(40)) * 512 + 511,
      name: e.subarray(56, 128).toString('utf16le').replace(/\0.*$/s, ''),
    });
  }
  return parts;
}

function guid(b: Buffer): string {
  const h = b.toString('hex');
  const swap = (s: string) => s.match(/../g)!.reverse().join('');
  return `${swap(h.slice(0, 8))}-${swap(h.slice(8, 12))}-${swap(h.slice(12, 16))}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const ESP_TYPE = 'c12a7328-f81f-11d2-ba4b-00a0c93ec93b';

/** The md superblock (1.2: 4 KiB into the member) of a partition: the array's UUID and name, or null. */
async function md12(file: string, p: GptPartition): Promise<{ uuid: string; name: string } | null> {
  const sb = await bytesAt(file, p.firstByte + 4096, 64);
  if (!sb.subarray(0, 4).equals(MD_MAGIC)) return null;
  return {
    uuid: sb.subarray(16, 32).toString('hex'),
    name: sb.subarray(32, 64).toString('latin1').replace(/\0+$/, ''),
  };
}

/** Whether the VM has ended within `ms`. */
async function exitedWithin(v: Vm, ms: number): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<false>((r) => (timer = setTimeout(() => r(false), ms)));
  const ended = await Promise.race([v.exited.then(() => true as const), timeout]);
  clearTimeout(timer);
  return ended;
}

/** Boots the ramdisk on both disks under OVMF (the VARS file the deploy's efibootmgr writes) for Ironic. */
async function bootRamdisk(): Promise<Vm> {
  const r = rig!;
  const v = await startVm({
    slottedDisks: [diskA, diskB],
    uefi: { code: OVMF_CODE, vars },
    serialLog: join(work.dir, `serial-${serials.length}.log`),
    mac,
    forwards: [...r.forwards, { guestPort: PROXY_PORT_IN_GUEST, hostPort: Number(new URL(proxy!.url).port) }],
    append: (agentPort) => `ipa-debug=1 ${r.kernelArgs(agentPort)}`,
  });
  serials.push('');
  r.vm = v;
  return v;
}

function keepSerial(v: Vm): void {
  serials[serials.length - 1] = v.serial();
}

const node = () => rig!.get<RaidNode>(`/v1/nodes/${uuid}`);

/** PUT /states/provision. */
const provision = (target: string, extra: Record<string, unknown> = {}) =>
  rig!.send('PUT', `/v1/nodes/${uuid}/states/provision`, { target, ...extra });

/** Polls until the node is in `state` (any target), failing with the logs when a failed state comes first. */
async function reach(state: string, timeoutMs: number): Promise<RaidNode> {
  try {
    return await until(
      `node in "${state}"`,
      async () => {
        const n = await node();
        if (/fail/.test(n.provision_state)) throw new Error(`node in ${n.provision_state}: ${n.last_error}`);
        return n.provision_state === state ? n : undefined;
      },
      timeoutMs,
      1000,
    );
  } catch (err) {
    throw new Error(`${(err as Error).message}\n${await rig!.explain()}`);
  }
}

/** The steps the conductor ran on the node since `from` (its log's "Executing {step} on node" lines), in order. */
async function stepsRun(from: number): Promise<string[]> {
  const log = (await rig!.ironic.conductorLog()).slice(from);
  return [...log.matchAll(/Executing \{[^}]*'step': '(\w+)'[^\n]* on node /g)].map((m) => m[1]!);
}

const logLength = async () => (await rig!.ironic.conductorLog()).length;

describe.skipIf(unavailable)(
  `${S}: Metal3's sequence, a deploy onto the array, the instance booting from either disk`,
  () => {
    let createdAt = '';
    // the boots need the deploy; undeploy does not need the boots
    let deployed = false;

    it(
      'manual clean: delete_configuration, erase_devices_metadata, create_configuration builds the RAID-1',
      () =>
        chain.step('clean', async () => {
          const r = rig!;
          vm = await bootRamdisk();
          // fake power starts as None; fast track needs the node "on"
          await r.bm.run(['node', 'power', 'on', uuid]);
          await r.bm.run(['node', 'manage', uuid]);
          await r.waitForState(uuid, 'manageable', 120_000);
          const looked = await phase('ramdisk boot -> heartbeat', () => r.heartbeated(uuid, 600_000));
          report(
            `agent at ${looked.driver_internal_info.agent_url}, ${((Date.now() - vm!.startedAt) / 1000).toFixed(1)} s after power-on`,
          );
          expect(looked.driver_internal_info.agent_url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);

          // PUT /v1/nodes/{node}/states/raid, as gophercloud does for BMO
          await r.send('PUT', `/v1/nodes/${uuid}/states/raid`, TARGET);
          expect((await node()).target_raid_config).toEqual(TARGET);
          const steps = [
            { interface: 'raid', step: 'delete_configuration' },
            { interface: 'deploy', step: 'erase_devices_metadata' },
            { interface: 'raid', step: 'create_configuration' },
          ];
          const logFrom = await logLength();
          await provision('clean', { clean_steps: steps });
          await phase('manual clean (delete, erase metadata, create)', () =>
            r.waitForState(uuid, 'manageable', 900_000),
          );
          const cleaned = await node();
          expect(cleaned.last_error).toBeNull();
          // Ironic's post-create hook recorded what the agent returned
          expect(cleaned.raid_config.logical_disks).toEqual(TARGET.logical_disks);
          createdAt = cleaned.raid_config.last_updated;
          expect(Date.parse(createdAt)).not.toBeNaN();
          expect(await stepsRun(logFrom)).toEqual([
            'delete_configuration',
            'erase_devices_metadata',
            'create_configuration',
          ]);

          // On each holder: GPT (UEFI), the RAID partition from 551 MiB (room for the ESP) to the end, a 1.2
          // superblock of one array on both.
          const arrays: string[] = [];
          for (const d of [diskA, diskB]) {
            const parts = await gpt(d.file);
            expect(parts, `${d.serial}: one RAID partition`).toHaveLength(1);
            expect(parts[0]!.firstByte).toBe(551 * MiB);
            expect(parts[0]!.lastByte).toBeGreaterThan(DISK_BYTES - 2 * MiB);
            const sb = await md12(d.file, parts[0]!);
            expect(sb, `${d.serial}: an md superblock 4 KiB into partition 1`).not.toBeNull();
            arrays.push(sb!.uuid);
          }
          expect(arrays[0]).toBe(arrays[1]);
        }),
      1_800_000,
    );

    it(
      'deploy: apply_configuration from a deploy template, the cloud image and a config drive onto the array -> active',
      () =>
        chain.step('deploy', async () => {
          const r = rig!;
          await r.send('POST', '/v1/deploy_templates', {
            name: TRAIT,
            steps: [
              {
                interface: 'raid',
                step: 'apply_configuration',
                args: { raid_config: TARGET, delete_existing: true },
                // after the agent is up (deploy.deploy, 100), before write_image (80)
                priority: 90,
              },
            ],
          });
          await r.send('PUT', `/v1/nodes/${uuid}/traits/${TRAIT}`);
          // provide: automated cleaning (metadata only), fast track on the running agent
          await r.bm.run(['node', 'provide', uuid]);
          await phase('provide (automated metadata clean)', () => r.waitForState(uuid, 'available', 900_000));
          await r.send('PATCH', `/v1/nodes/${uuid}`, [
            {
              op: 'add',
              path: '/instance_info',
              value: {
                image_source: imageInfo.url,
                image_disk_format: 'qcow2',
                image_os_hash_algo: 'sha256',
                image_os_hash_value: imageInfo.sha256,
                traits: [TRAIT],
              },
            },
          ]);
          const configdrive = {
            meta_data: { uuid, hostname: 'raid-instance' },
            // bootcmd runs at every boot: each of the three boots prints it
            user_data: `#cloud-config\nbootcmd:\n  - echo "${marker} $(cat /proc/mdstat | tr '\\n' ' ')" > /dev/ttyS0\n`,
            network_data: { links: [], networks: [], services: [] },
          };
          const before = vm!.serial().length;
          const logFrom = await logLength();
          await provision('active', { configdrive });
          await phase('deploy (apply_configuration, write, boot loader) -> active', () =>
            r.waitForState(uuid, 'active', 1_800_000),
          );
          const active = await node();
          expect(active.last_error).toBeNull();
          // tear_down_agent's standby.power_off: the agent powered the VM off
          expect(await exitedWithin(vm!, 120_000), 'the agent powered the VM off (standby.power_off)').toBe(true);
          const console = vm!.serial().slice(before);
          keepSerial(vm!);
          vm = undefined;
          const run = await stepsRun(logFrom);
          report(`deploy steps: ${run.join(', ')}`);
          // the template's step after the agent came up, before the image was written
          expect(run.indexOf('apply_configuration')).toBeGreaterThan(run.indexOf('deploy'));
          expect(run.indexOf('apply_configuration')).toBeLessThan(run.indexOf('write_image'));
          expect(run.indexOf('write_image')).toBeLessThan(run.indexOf('prepare_instance_boot'));
          // prepare_instance_boot asked the agent for the boot loader: software RAID, whatever the boot mode
          expect(console).toContain('image.install_bootloader');
          // the image came through the proxy from the image server, and nothing else went through it
          expect(proxy!.seen).toContain(imageInfo.url);
          expect(
            proxy!.seen.every((u) => u === imageInfo.url),
            proxy!.seen.join(', '),
          ).toBe(true);
          expect(active.raid_config.logical_disks).toEqual(TARGET.logical_disks);
          expect(Date.parse(active.raid_config.last_updated)).toBeGreaterThan(Date.parse(createdAt));

          for (const d of [diskA, diskB]) expect(await md12(d.file, (await gpt(d.file))[0]!)).not.toBeNull();
          deployed = true;
        }),
      2_400_000,
    );

    /** Boots the instance from `disks` through OVMF and its NVRAM; returns the boot entry the firmware started. */
    async function bootInstance(label: string, disks: SlottedDisk[]): Promise<{ entry: string; path: string }> {
      const v = await startVm({
        boot: 'firmware',
        slottedDisks: disks,
        uefi: { code: OVMF_CODE, vars },
        serialLog: join(work.dir, `serial-${serials.length}.log`),
        mac,
        forwards: [],
      });
      vm = v;
      rig!.vm = v;
      serials.push('');
      try {
        const screen = await phase(`instance boot (${label}) -> cloud-init marker`, () =>
          untilCloudInit(v, marker, label),
        );
        const ds = /Datasource DataSourceConfigDrive \[[^\]]*\]\[source=(\/dev\/\S+?)\]/.exec(screen);
        expect(ds, `${label}: cloud-init read the config drive`).not.toBeNull();
        report(
          `${label}: config drive ${ds![1]}; ${screen
            .split('\n')
            .find((l) => l.includes(marker))
            ?.trim()}`,
        );
        // the config drive partition is on the array, not on a disk
        expect(ds![1]).toMatch(/^\/dev\/md\d+p\d+$/);
        const loaded = [...screen.matchAll(/BdsDxe: loading (Boot[0-9A-F]{4}) "([^"]*)" from (\S+)/g)];
        expect(loaded.length, `${label}: the firmware loaded a boot entry`).toBeGreaterThan(0);
        const last = loaded.at(-1)!;
        report(`${label}: firmware started ${last[1]} "${last[2]}" from ${last[3]}`);
        // Power cut, not an ACPI shutdown: the image has no logind to act on the power button. The arrays are then
        // left unclean, which md's RAID-1 starts from anyway, degraded or not.
        return { entry: last[2]!, path: last[3]! };
      } finally {
        await v.kill();
        keepSerial(v);
        vm = undefined;
      }
    }

    it('the instance boots from its disks and reads the config drive: both disks, disk A removed, disk B removed', async () => {
      if (!deployed) throw new Error('not run: the deploy failed');
      // Each holder: the RAID partition and an ESP the boot loader step added, with its own boot entry.
      const esp: string[] = [];
      for (const d of [diskA, diskB]) {
        const parts = await gpt(d.file);
        report(
          `${d.serial}: ${parts.map((p) => `${p.number} ${p.type === ESP_TYPE ? 'ESP' : p.type} "${p.name}" ${p.firstByte / MiB}-${(p.lastByte + 1) / MiB} MiB`).join('; ')}`,
        );
        const esps = parts.filter((p) => p.type === ESP_TYPE);
        expect(esps, `${d.serial}: an ESP`).toHaveLength(1);
        esp.push(esps[0]!.guid.toUpperCase());
      }
      // The firmware starts an entry the agent wrote, on the ESP of a disk that is there (the entry's HD() node
      // names the partition by its GUID): holder 0 is disk A, holder 1 disk B.
      const both = await bootInstance('both disks', [diskA, diskB]);
      expect(both.entry).toMatch(/ \(RAID, part[01]\)$/);
      const onlyB = await bootInstance('disk A removed', [diskB]);
      expect(onlyB.entry).toMatch(/ \(RAID, part1\)$/);
      expect(onlyB.path.toUpperCase()).toContain(esp[1]);
      const onlyA = await bootInstance('disk B removed', [diskA]);
      expect(onlyA.entry).toMatch(/ \(RAID, part0\)$/);
      expect(onlyA.path.toUpperCase()).toContain(esp[0]);
    }, 3_600_000);

    it(
      'undeploy with metadata cleaning -> available',
      () =>
        chain.step('undeploy', async () => {
          const r = rig!;
          const logFrom = await logLength();
          await r.bm.run(['node', 'undeploy', uuid]);
          // fake power: Ironic "reboots" the node into the ramdisk and waits for its agent; the test boots it
          await reach('clean wait', 300_000);
          vm = await bootRamdisk();
          await phase('undeploy (ramdisk boot, metadata clean) -> available', () =>
            r.waitForState(uuid, 'available', 1_200_000),
          );
          const after = await node();
          expect(after.last_error).toBeNull();
          // automated cleaning, metadata only (erase_devices off); fast track leaves the ramdisk running ("power on")
          expect(await stepsRun(logFrom)).toEqual(['erase_devices_metadata']);
          keepSerial(vm);
        }),
      1_800_000,
    );
  },
);
