// A whole-disk image on software RAID made bootable, in the built ramdisk under OVMF (this machine's kernel has
// no md): apply_configuration builds a RAID-1 of two virtio disks, write_image streams a small GPT image with an
// EFI system partition and a config drive onto /dev/md0 (chosen by a name hint), install_bootloader gives each
// holder an ESP (a RAID-1 with metadata 1.0) holding the image ESP's files and a firmware boot entry, and finds
// all of it done when run again. BIOS is refused as IPA refuses it. After power-off the disk files and the
// firmware's variable store are read from outside.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildIso, toWire } from '../helpers/configdrive.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { makeDiskImage, workDir, type DiskImage } from '../helpers/make-image.ts';
import { bytesAt, reporter, startRaidVm, type RaidVm } from './raid-vm.ts';
import { HOST_IN_GUEST } from './vm.ts';

const MiB = 2 ** 20;
const IMAGES_PORT = 8080;
const NODE_UUID = '0c3e53a2-3a3b-4d7e-8f60-9a1b2c3d4e51';
const MD_MAGIC = Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]);
const LOADER = 'not really a loader, but the firmware entry only names it';
const report = reporter('raid-boot');
const started = Date.now();

let work: Awaited<ReturnType<typeof workDir>>;
let images: ImageServer;
let img: DiskImage;
let iso: Buffer;
let machine: RaidVm;

beforeAll(async () => {
  work = await workDir('ina-e2e-raid-boot-img-');
  img = await makeDiskImage(work.dir, {
    sizeMiB: 48,
    esp: {
      sizeMiB: 16,
      label: 'EFI',
      serial: '1234ABCD',
      files: {
        'EFI/BOOT/BOOTX64.EFI': LOADER,
        'EFI/debian/grubx64.efi': LOADER,
        'EFI/debian/grub.cfg': 'configfile $prefix/grub.cfg\n',
      },
    },
  });
  iso = await buildIso();
  images = await startImageServer();
  const url = new URL(await images.serveFile('raid.raw', img.path));
  machine = await startRaidVm({
    tag: 'raid-boot',
    disks: 2,
    diskGiB: 2,
    uefi: true,
    forwards: [{ guestPort: IMAGES_PORT, hostPort: Number(url.port) }],
    append: 'standalone=1 ipa-debug=1',
  });
}, 600_000);

afterAll(async () => {
  await machine?.close();
  await images?.close();
  await work?.cleanup();
  report(`whole file took ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

const node = {
  uuid: NODE_UUID,
  properties: {},
  instance_info: { root_device: { name: 's== /dev/md0' } },
  driver_internal_info: {},
};

const deployStep = (step: string, iface: string, args: Record<string, unknown>) =>
  machine.deployStep(node, step, iface, args);

/** The GPT inside a RAID-1 member starting at `memberStart`: `dataStart` is where the array's data begins. */
async function gptInMember(disk: string, memberStart: number) {
  const window = await bytesAt(disk, memberStart, 256 * MiB);
  for (let off = 0; off < window.length - 1024; off += 4096) {
    if (window.subarray(off + 512, off + 520).toString('latin1') !== 'EFI PART') continue;
    const entries = window.subarray(off + 1024, off + 1024 + 128 * 128);
    const parts: { number: number; start: number; end: number }[] = [];
    for (let i = 0; i < 128; i++) {
      const e = entries.subarray(i * 128, (i + 1) * 128);
      if (e.subarray(0, 16).every((b) => b === 0)) continue;
      parts.push({
        number: i + 1,
        start: Number(e.readBigUInt64LE(32)) * 512,
        end: (Number(e.readBigUInt64LE(40)) + 1) * 512,
      });
    }
    return { dataStart: memberStart + off, parts };
  }
  throw new Error(`no GPT in the RAID member of ${disk} at ${memberStart}`);
}

describe('a whole-disk image on software RAID under UEFI (OVMF)', () => {
  it('apply_configuration builds a RAID-1 of both disks, with room for the ESP in front', async () => {
    const raidConfig = { logical_disks: [{ controller: 'software', size_gb: 'MAX', raid_level: '1' }] };
    const r = await deployStep('apply_configuration', 'raid', { raid_config: raidConfig, delete_existing: true });
    expect(r.command_error).toBeNull();
    for (const d of machine.disks) {
      const { stdout } = await execa('sgdisk', ['-p', d]);
      // UEFI: GPT, the RAID partition from 551 MiB.
      expect(stdout).toMatch(/^\s+1\s+1128448\s+\d+\s/m);
    }
  });

  it('write_image streams the image with a config drive onto /dev/md0', async () => {
    const raw = await readFile(img.path);
    const r = await deployStep('write_image', 'deploy', {
      image_info: {
        id: 'raid-image',
        urls: [`http://${HOST_IN_GUEST}:${IMAGES_PORT}/raid.raw`],
        disk_format: 'raw',
        stream_raw_images: true,
        os_hash_algo: 'sha256',
        os_hash_value: createHash('sha256').update(raw).digest('hex'),
      },
      configdrive: toWire(iso),
    });
    expect(r.command_error).toBeNull();
    expect(JSON.stringify(r.command_result)).toContain('written to device /dev/md0');
  });

  it('install_bootloader gives each holder an ESP with the loader files and a boot entry; a second run finds them', async () => {
    const first = await machine.command('image.install_bootloader', {
      root_uuid: null,
      efi_system_part_uuid: null,
      target_boot_mode: 'uefi',
    });
    expect(first.command_error).toBeNull();
    const text = String(first.command_result!.result);
    report(`install_bootloader: ${text}`);
    expect(text).toContain('/dev/vda2 made');
    expect(text).toContain('/dev/vdb2 made');
    expect(text).toMatch(/\/dev\/md1 created \(RAID-1, metadata 1\.0\) on \/dev\/vda2, \/dev\/vdb2/);
    expect(text).toMatch(/\/dev\/md0p1 copied to \/dev\/md1 \(FAT serial 1234-ABCD, label EFI\) and wiped/);
    expect(text).toContain('debian (RAID, part0) (\\EFI\\debian\\grubx64.efi) registered');
    expect(text).toContain('debian (RAID, part1) (\\EFI\\debian\\grubx64.efi) registered');

    // efibootmgr reads the firmware's entries back: each holder's is there; the ESPs and their array too.
    const second = await machine.command('image.install_bootloader', { root_uuid: null, target_boot_mode: 'uefi' });
    expect(second.command_error).toBeNull();
    const again = String(second.command_result!.result);
    expect(again).not.toContain(' made');
    expect(again).not.toContain('created');
    expect(again).toContain('/dev/md1 holds the EFI files already');
    expect(again).toContain('debian (RAID, part0) (\\EFI\\debian\\grubx64.efi) already registered');
    expect(again).toContain('debian (RAID, part1) (\\EFI\\debian\\grubx64.efi) already registered');
  });

  it('refuses a BIOS boot loader on software RAID as IPA does (enable_bios_bootloader_install is off)', async () => {
    const r = await machine.command('image.install_bootloader', {
      root_uuid: '0x12345678',
      target_boot_mode: 'bios',
    });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({
      type: 'InvalidImage',
      details:
        'Install of legacy BIOS bootloaders disabled by CONF.enable_bios_bootloader_install as part of CVE-2026-43003 mitigation.',
    });
  });

  it('after power-off: both holders carry the image, the config drive, an ESP with the files; the firmware keeps both entries', async () => {
    await machine.powerOff();
    const raw = await readFile(img.path);
    const root = raw.subarray(img.partition.start, img.partition.end);
    const sum = (b: Buffer) => createHash('sha256').update(b).digest('hex');
    for (const [i, disk] of machine.disks.entries()) {
      const { stdout } = await execa('sgdisk', ['-p', disk]);
      // The ESP in the room the layout kept: 1 MiB to 551 MiB, type EF00, named as IPA names it.
      expect(stdout).toMatch(new RegExp(`^\\s+2\\s+2048\\s+1128447\\s+550\\.0 MiB\\s+EF00\\s+uefi-holder-${i}$`, 'm'));
      // Metadata 1.0: the md superblock at the partition's end, so the firmware reads a plain FAT from its start.
      const espBytes = 550 * MiB;
      const sb = MiB + ((espBytes / 512 - 16) & ~7) * 512;
      expect((await bytesAt(disk, sb, 4)).equals(MD_MAGIC)).toBe(true);
      const fat = `${disk}@@${MiB}`;
      const env = { MTOOLS_SKIP_CHECK: '1' };
      const dir = await execa('mdir', ['-i', fat, '::/EFI/debian'], { env });
      expect(dir.stdout).toContain('Volume Serial Number is 1234-ABCD');
      expect(dir.stdout).toMatch(/Volume in drive : is EFI/);
      for (const f of ['EFI/debian/grubx64.efi', 'EFI/BOOT/BOOTX64.EFI']) {
        expect((await execa('mtype', ['-i', fat, `::/${f}`], { env })).stdout).toBe(LOADER);
      }
      // The mirror: the image's GPT, its root partition's bytes and a config-2 partition in each member.
      const gpt = await gptInMember(disk, 551 * MiB);
      const rootPart = gpt.parts.find((p) => p.number === 2)!;
      expect(sum(await bytesAt(disk, gpt.dataStart + rootPart.start, root.length))).toBe(sum(root));
      const labels = await Promise.all(
        gpt.parts.map(async (p) =>
          (await bytesAt(disk, gpt.dataStart + p.start + 0x8028, 32)).toString('latin1').trim(),
        ),
      );
      const cd = gpt.parts[labels.indexOf('config-2')];
      expect(cd, `config-2 among ${JSON.stringify(gpt.parts)}`).toBeDefined();
      expect((await bytesAt(disk, gpt.dataStart + cd!.start, iso.length)).equals(iso)).toBe(true);
      // The image's own ESP was wiped (its FAT moved to the holders' ESPs): no FAT boot signature left.
      const esp = gpt.parts.find((p) => p.number === 1)!;
      expect((await bytesAt(disk, gpt.dataStart + esp.start + 510, 2)).toString('hex')).not.toBe('55aa');
    }
    // The firmware kept an entry per holder in its variable store: labels and loader path, as UTF-16.
    const store = await readFile(machine.vars!);
    for (const label of ['debian (RAID, part0)', 'debian (RAID, part1)'])
      expect(store.includes(Buffer.from(label, 'utf16le')), label).toBe(true);
    expect(store.includes(Buffer.from('\\EFI\\debian\\grubx64.efi', 'utf16le'))).toBe(true);
  });
});
