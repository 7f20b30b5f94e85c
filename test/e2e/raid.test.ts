// Software RAID in the built ramdisk under QEMU (this machine's kernel has no md): one boot with three blank
// virtio disks, then the cases through the agent's API as Ironic sends them: a refusal that touches no disk,
// create_configuration with a RAID-1 and a RAID-0 of the rest (MAX, is_root_volume false), the md devices among
// the disks the agent sees (the list the inventory and root-device choice read) with the members protected and
// the RAID-0 left out of the root device choice, delete_configuration leaving no superblock and no table, the
// apply_configuration deploy step on all disks, and install_bootloader refusing a boot loader it would have to
// install from the image (BIOS).
import { stat } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { bytesAt, reporter, startRaidVm, type RaidVm, type Result } from './raid-vm.ts';

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const NODE_UUID = 'f6a0c9a4-4a8b-4f3e-9d7a-5b1c2d3e4f50';
const report = reporter('raid');
let machine: RaidVm;
let disks: string[];
const started = Date.now();

beforeAll(async () => {
  machine = await startRaidVm({
    tag: 'raid',
    disks: 3,
    diskGiB: 3,
    // No download retries: the write_image probes below fail at a download nobody serves, after the device choice.
    append: 'standalone=1 ipa-debug=1 ipa-image-download-connection-retries=0',
  });
  disks = machine.disks;
});

afterAll(async () => {
  await machine?.close();
  report(`whole file took ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

const command = (name: string, params: Record<string, unknown>): Promise<Result> => machine.command(name, params);

const node = (extra: Record<string, unknown> = {}) => ({
  uuid: NODE_UUID,
  properties: {},
  instance_info: {},
  driver_internal_info: {},
  ...extra,
});

const raidStep = (step: string, priority = 0) => ({
  step,
  priority,
  interface: 'raid',
  reboot_requested: false,
  abortable: true,
  args: {},
});

const clean = (step: string, n: Record<string, unknown>) =>
  command('clean.execute_clean_step', { step: raidStep(step), node: n, ports: [], clean_version: {} });

/**
 * The devices the agent sees, and why it would not deploy onto each: asked by a root device hint no disk
 * matches, whose refusal lists every device (the lsblk view the inventory also reads) with the guard's verdict.
 */
async function devicesSeen(): Promise<string> {
  const r = await writeImage({ name: '/dev/nosuch' });
  expect(r.command_error?.type).toBe('DeviceNotFound');
  return r.command_error!.details;
}

/** write_image of an image no server serves, onto the device `hints` choose: the choice is made before the download. */
function writeImage(hints: Record<string, unknown>): Promise<Result> {
  return command('deploy.execute_deploy_step', {
    step: {
      step: 'write_image',
      priority: 0,
      interface: 'deploy',
      reboot_requested: false,
      args: {
        image_info: {
          id: 'none',
          urls: ['http://127.0.0.1:9/none.raw'],
          disk_format: 'raw',
          os_hash_algo: 'sha256',
          os_hash_value: '0'.repeat(64),
        },
        configdrive: null,
      },
    },
    node: node({ instance_info: { root_device: hints } }),
    ports: [],
    deploy_version: {},
  });
}

/** The size the refusal lists for /dev/<name>, in GiB. */
function gib(seen: string, name: string): number {
  const m = new RegExp(`/dev/${name} \\((\\d+\\.\\d+) GiB\\)`).exec(seen);
  expect(m, `/dev/${name} among the devices seen`).not.toBeNull();
  return Number(m![1]);
}

const MD_MAGIC = Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]);
const software = (d: Record<string, unknown>) => ({ controller: 'software', ...d });
const pair = [{ name: '/dev/vda' }, { name: '/dev/vdb' }];

describe('software RAID in the ramdisk under QEMU', () => {
  it('refuses an invalid target_raid_config before any disk is touched', async () => {
    const r = await clean(
      'create_configuration',
      node({
        target_raid_config: {
          logical_disks: [software({ size_gb: 1, raid_level: '0' }), software({ size_gb: 'MAX', raid_level: '6' })],
        },
      }),
    );
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({
      type: 'SoftwareRAIDError',
      details:
        `Could not validate Software RAID config for ${NODE_UUID}: ` +
        'Software RAID Configuration requires RAID-1 for the first logical disk; ' +
        'Software RAID configuration is not possible for RAID level 6 with only 3 block devices found.',
    });
    // Sparse files nothing was written to: no block allocated.
    for (const d of disks) expect((await stat(d)).blocks).toBe(0);
  });

  it('create_configuration: a RAID-1 named root and a RAID-0 of the rest (MAX), on vda and vdb', async () => {
    const target = {
      logical_disks: [
        software({ size_gb: 1, raid_level: '1', volume_name: 'root', physical_disks: pair }),
        // As BMO marks a volume that is not the root one.
        software({ size_gb: 'MAX', raid_level: '0', physical_disks: pair, is_root_volume: false }),
      ],
    };
    const r = await clean('create_configuration', node({ target_raid_config: target }));
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ clean_result: target });

    // BIOS boot (SeaBIOS), no disk_label: an msdos table on each holder, the RAID-1 partition from parted's
    // first free sector to 1 GiB, the RAID-0 one from there to the end; a 1.2 superblock 4 KiB into each.
    for (const d of disks.slice(0, 2)) {
      const mbr = await bytesAt(d, 0, 512);
      expect(mbr.subarray(510).toString('hex')).toBe('55aa');
      const entry = (i: number) => mbr.subarray(446 + 16 * i, 462 + 16 * i);
      expect(entry(0)[4]).toBe(0x83);
      const p1Start = entry(0).readUInt32LE(8);
      const p1Sectors = entry(0).readUInt32LE(12);
      expect(p1Start).toBe(2048);
      expect((p1Start + p1Sectors) * 512).toBe(GiB);
      expect(entry(1).readUInt32LE(8) * 512).toBe(GiB);
      expect((await bytesAt(d, p1Start * 512 + 4096, 4)).equals(MD_MAGIC)).toBe(true);
    }
    expect((await stat(disks[2]!)).blocks).toBe(0);

    const seen = await devicesSeen();
    report(`devices seen: ${seen}`);
    // md0: the RAID-1 of two 1023 MiB partitions; md1: the RAID-0 of two 2 GiB ones; less mdadm's data offset
    // (the message rounds to 0.01 GiB).
    expect(gib(seen, 'md0')).toBeGreaterThan(0.9);
    expect(gib(seen, 'md0')).toBeLessThanOrEqual(1);
    expect(gib(seen, 'md1')).toBeGreaterThan(3.8);
    expect(gib(seen, 'md1')).toBeLessThan(4);
    // A holder, written alone, would corrupt the arrays: the guard refuses it, and so the root device choice.
    expect(seen).toMatch(
      /\/dev\/vda \(3\.00 GiB, serial E2EDISK0\): protected, it is the holder of vda\d, a member of the software RAID array md\d/,
    );
    expect(seen).toMatch(/\/dev\/vdc \(3\.00 GiB, serial E2EDISK2\)(;|$)/);
    // is_root_volume false, remembered from the build: md1 is no root device candidate; md0 (unset) still is.
    expect(seen).toMatch(/\/dev\/md1 \([^)]*\): left out, \/dev\/md1 was built with is_root_volume false/);
    expect(seen).toMatch(/\/dev\/md0 \([^)]*\)(;|$)/);
    const serial = machine.vm.serial();
    expect(serial).toContain('md array created');
  });

  it('delete_configuration stops the arrays, clears the superblocks and the holders’ tables', async () => {
    const r = await clean('delete_configuration', node());
    expect(r.command_error).toBeNull();
    const seen = await devicesSeen();
    expect(seen).not.toContain('/dev/md');
    expect(seen).not.toContain('protected');
    for (const d of disks.slice(0, 2)) {
      expect((await bytesAt(d, 510, 2)).toString('hex')).toBe('0000');
      expect((await bytesAt(d, 2048 * 512 + 4096, 4)).equals(MD_MAGIC)).toBe(false);
      expect((await bytesAt(d, GiB + 4096, 4)).equals(MD_MAGIC)).toBe(false);
    }
  });

  it('apply_configuration (deploy step) builds a RAID-1 of all disks from its raid_config argument', async () => {
    const raidConfig = { logical_disks: [software({ size_gb: 'MAX', raid_level: '1' })] };
    const r = await command('deploy.execute_deploy_step', {
      step: {
        step: 'apply_configuration',
        priority: 0,
        interface: 'raid',
        reboot_requested: false,
        args: { raid_config: raidConfig, delete_existing: true },
      },
      node: node(),
      ports: [],
      deploy_version: {},
    });
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ deploy_result: raidConfig });
    const seen = await devicesSeen();
    expect(gib(seen, 'md0')).toBeGreaterThan(2.8);
    expect(gib(seen, 'md0')).toBeLessThanOrEqual(3);
    for (const dev of ['vda', 'vdb', 'vdc'])
      expect(seen).toMatch(
        new RegExp(
          `/dev/${dev} \\([^)]*\\): protected, it is the holder of ${dev}1, a member of the software RAID array md0`,
        ),
      );
    for (const d of disks) expect((await bytesAt(d, MiB + 4096, 4)).equals(MD_MAGIC)).toBe(true);
    // The array is a root device candidate: the name hint chooses it, and the write fails only at the download.
    const onto = await writeImage({ name: 's== /dev/md0' });
    expect(onto.command_error?.type).not.toBe('DeviceNotFound');
    expect(machine.vm.serial()).toMatch(/root device chosen[^\n]*\/dev\/md0|\/dev\/md0[^\n]*root device chosen/);
  });

  it('install_bootloader on the array refuses a boot loader it would have to install from the image, as IPA does', async () => {
    // The node of the last deploy step named /dev/md0. BIOS needs grub-install from the image; a ramdisk booted in
    // BIOS mode cannot write UEFI boot entries either: both are IPA's refusal with enable_bios_bootloader_install off.
    for (const target_boot_mode of ['bios', 'uefi']) {
      const r = await command('image.install_bootloader', { root_uuid: '0x12345678', target_boot_mode });
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error).toMatchObject({
        type: 'InvalidImage',
        details:
          'Install of legacy BIOS bootloaders disabled by CONF.enable_bios_bootloader_install as part of CVE-2026-43003 mitigation.',
      });
    }
    const ignored = await command('image.install_bootloader', {
      root_uuid: null,
      target_boot_mode: 'bios',
      ignore_bootloader_failure: true,
    });
    expect(ignored.command_status).toBe('SUCCEEDED');
    expect(String(ignored.command_result?.result)).toContain('failed and was ignored as configured');
  });
});
