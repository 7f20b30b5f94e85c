// image.install_bootloader for whole-disk images, and the ESP loader discovery it relies on (mtools on a
// real FAT ESP on a loop device). Boot entries are registered by the real efibootmgr in a fake firmware root
// (--ina-firmware-root, test/helpers/fake-firmware.ts); without one, outside the ramdisk, the host's firmware
// is left alone.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { chooseLoaders, findEfiLoaders, parseBootCsv } from '../../agent/disk/efi-loaders.ts';
import { firmwarePath } from '../../agent/disk/efi-boot.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { startAgent } from '../helpers/api-harness.ts';
import { fakeFirmware } from '../helpers/fake-firmware.ts';
import { GiB, MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

const env = { MTOOLS_SKIP_CHECK: '1' };
const csv = (text: string) => Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(text, 'utf16le')]);

/** A GPT disk whose first partition is a FAT ESP holding `files`. */
async function makeEsp(d: LoopDevice, files: Record<string, Buffer | string>): Promise<string> {
  await execa('sgdisk', ['-n', '1:0:+40M', '-t', '1:ef00', '-n', '2:0:+8M', d.path]);
  await execa('partx', ['-u', d.path]);
  const esp = `${d.path}p1`;
  await execa('mkfs.vfat', ['-F', '32', esp]);
  const work = await mkdtemp(join(tmpdir(), 'ina-esp-fixture-'));
  try {
    for (const [path, content] of Object.entries(files)) {
      const dirs = path.split('/').slice(0, -1);
      for (let i = 1; i <= dirs.length; i++)
        await execa('mmd', ['-D', 's', '-i', esp, `::/${dirs.slice(0, i).join('/')}`], { env, reject: false });
      const local = join(work, 'f');
      await writeFile(local, content);
      await execa('mcopy', ['-i', esp, local, `::/${path}`], { env });
    }
  } finally {
    await rm(work, { recursive: true, force: true });
  }
  return esp;
}

describe('EFI loader discovery', () => {
  it.each([
    [
      'shim before grub',
      ['EFI/debian/grubx64.efi', 'EFI/debian/shimx64.efi', 'EFI/debian/mmx64.efi'],
      [{ path: 'EFI/debian/shimx64.efi', label: 'debian' }],
    ],
    [
      'grub when there is no shim',
      ['EFI/ubuntu/grubx64.efi', 'EFI/BOOT/BOOTX64.EFI'],
      [{ path: 'EFI/ubuntu/grubx64.efi', label: 'ubuntu' }],
    ],
    [
      'another loader, never MokManager or fallback',
      ['EFI/acme/mmx64.efi', 'EFI/acme/fbx64.efi', 'EFI/acme/loader.efi'],
      [{ path: 'EFI/acme/loader.efi', label: 'acme' }],
    ],
    [
      'the removable-media path as last resort',
      ['EFI/BOOT/BOOTX64.EFI'],
      [{ path: 'EFI/BOOT/BOOTX64.EFI', label: 'ironic' }],
    ],
    ['nothing', ['EFI/debian/grub.cfg'], []],
  ])('%s', (_label, files, expected) => {
    expect(chooseLoaders(files, new Map(), 'x64')).toEqual(expected);
  });

  it("follows shim's BOOTX64.CSV when present", () => {
    const files = ['EFI/fedora/shimx64.efi', 'EFI/fedora/grubx64.efi', 'EFI/fedora/BOOTX64.CSV'];
    const list = new Map([['EFI/fedora/BOOTX64.CSV', csv('shimx64.efi,Fedora,,This is the boot entry for Fedora\n')]]);
    expect(chooseLoaders(files, list, 'x64')).toEqual([{ path: 'EFI/fedora/shimx64.efi', label: 'Fedora' }]);
    expect(parseBootCsv(csv('a.efi,A\r\n\r\n'))).toEqual([{ loader: 'a.efi', label: 'A' }]);
  });

  it('uses firmware path notation', () => {
    expect(firmwarePath('EFI/debian/shimx64.efi')).toBe('\\EFI\\debian\\shimx64.efi');
  });

  it('reads the loaders off a real FAT ESP without mounting it', async () => {
    await withLoops([64 * MiB], async ([d]) => {
      const esp = await makeEsp(d!, {
        'EFI/debian/shimx64.efi': 'shim',
        'EFI/debian/grubx64.efi': 'grub',
        'EFI/debian/BOOTX64.CSV': csv('shimx64.efi,Debian GNU/Linux,,entry\n'),
        'EFI/BOOT/BOOTX64.EFI': 'fallback',
      });
      expect(await findEfiLoaders(esp)).toEqual([{ path: 'EFI/debian/shimx64.efi', label: 'Debian GNU/Linux' }]);
    });
  });
});

describe('image.install_bootloader', () => {
  async function install(d: LoopDevice, params: Record<string, unknown>, firmwareRoot?: string) {
    const running = await startAgent({
      'device-allowlist': d.path,
      ...(firmwareRoot ? { 'ina-firmware-root': firmwareRoot } : {}),
    });
    const client = new AgentClient({ url: running.url, pollIntervalMs: 100 });
    try {
      return await client.command('image.install_bootloader', params, { poll: true });
    } finally {
      await client.close();
      await running.close();
    }
  }

  const result = (r: { command_result: unknown }) => (r.command_result as { result: string }).result;
  const uefi = {
    root_uuid: '0x00000000',
    efi_system_part_uuid: null,
    prep_boot_part_uuid: null,
    target_boot_mode: 'uefi',
  };

  it("registers the ESP's loaders in the firmware's boot entries (the real efibootmgr, a fake firmware root)", async () => {
    const fw = await fakeFirmware({ entries: [{ num: '0001', label: 'UEFI PXEv4' }] });
    try {
      await withLoops([5 * GiB], async ([d]) => {
        await makeEsp(d!, {
          'EFI/debian/shimx64.efi': 'shim',
          'EFI/debian/BOOTX64.CSV': csv('shimx64.efi,debian,,This is the boot entry for debian\n'),
        });
        const r = await install(d!, uefi, fw.root);
        expect(r.command_status).toBe('SUCCEEDED');
        expect(result(r)).toBe(
          `install_bootloader: boot entries on ${d!.path} partition 1: debian (\\EFI\\debian\\shimx64.efi) registered`,
        );
        expect(await fw.bootEntries()).toEqual(['0000', '0001']);
        const listing = await execa('efibootmgr', ['-v'], {
          env: { EFIVARFS_PATH: `${fw.efivars}/` },
        });
        expect(listing.stdout).toMatch(/Boot0000\* debian\s+HD\(1,GPT,.*\\EFI\\debian\\shimx64\.efi/i);
        // A second run finds the entry and adds none.
        const again = await install(d!, uefi, fw.root);
        expect(result(again)).toContain('debian (\\EFI\\debian\\shimx64.efi) already registered');
        expect(await fw.bootEntries()).toEqual(['0000', '0001']);
      });
    } finally {
      await fw.close();
    }
  });

  it("leaves the host's firmware alone outside the ramdisk (no firmware root)", async () => {
    await withLoops([5 * GiB], async ([d]) => {
      await makeEsp(d!, { 'EFI/debian/shimx64.efi': 'shim' });
      const r = await install(d!, uefi);
      expect(r.command_status).toBe('SUCCEEDED');
      expect(result(r)).toBe(
        `install_bootloader: nothing registered: outside the ramdisk (--host-actions=simulated, no --ina-firmware-root) the host's firmware boot entries are left alone; the firmware finds the loader on ${d!.path}p1 itself`,
      );
    });
  });

  it('succeeds without registering when the ramdisk did not boot in UEFI mode', async () => {
    const root = await mkdtemp(join(tmpdir(), 'ina-bios-firmware-'));
    try {
      await mkdir(join(root, 'sys', 'firmware'), { recursive: true });
      await withLoops([5 * GiB], async ([d]) => {
        await makeEsp(d!, { 'EFI/debian/shimx64.efi': 'shim' });
        const r = await install(d!, uefi, root);
        expect(r.command_status).toBe('SUCCEEDED');
        expect(result(r)).toMatch(
          new RegExp(`^install_bootloader: nothing registered: the ramdisk did not boot in UEFI mode.*${d!.path}p1`),
        );
      });
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('says there is nothing to do for a disk without an ESP', async () => {
    await withLoops([5 * GiB], async ([d]) => {
      await execa('sgdisk', ['-n', '1:0:+8M', d!.path]);
      const r = await install(d!, { root_uuid: null, target_boot_mode: 'uefi' });
      expect(r.command_status).toBe('SUCCEEDED');
      expect(result(r)).toContain(`${d!.path} has no EFI system partition`);
    });
  });

  it('says there is nothing to do in BIOS mode', async () => {
    await withLoops([5 * GiB], async ([d]) => {
      const r = await install(d!, { root_uuid: '0x1234abcd' });
      expect(result(r)).toBe(
        'install_bootloader: nothing to do: the whole-disk image boots in bios mode with its own boot loader',
      );
    });
  });

  it('fails when no disk qualifies, unless told to ignore boot loader failures', async () => {
    await withLoops([64 * MiB], async ([d]) => {
      const failed = await install(d!, { target_boot_mode: 'uefi' });
      expect(failed.command_status).toBe('FAILED');
      expect((failed.command_error as { type: string }).type).toBe('DeviceNotFound');
      const ignored = await install(d!, { target_boot_mode: 'uefi', ignore_bootloader_failure: true });
      expect(ignored.command_status).toBe('SUCCEEDED');
      expect(result(ignored)).toMatch(/failed and was ignored as configured: No suitable device/);
    });
  });
});
