// image: install_bootloader for whole-disk images. The image brings its own boot loader; in UEFI mode
// the agent registers it with the firmware when it can (ramdisk booted in UEFI mode, efibootmgr present),
// and otherwise succeeds saying why nothing was needed. Outside the ramdisk the firmware is a test's fake
// root (--ina-firmware-root) or left alone: never the host's boot entries.
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { optBool, optString } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { errorText } from '../../errors.ts';
import { hasTool } from '../../exec.ts';
import { registerBootEntries } from '../../disk/efi-boot.ts';
import { findEfiLoaders } from '../../disk/efi-loaders.ts';
import { findEsp } from '../../disk/partition-uuids.ts';
import { listPartitions, rescanPartitions } from '../../disk/partitions.ts';
import { chooseRootDevice } from '../../disk/root-device.ts';
import type { AgentServices } from '../../services.ts';

interface BootloaderParams {
  espUuid?: string;
  targetBootMode: string;
  ignoreFailure?: boolean;
}

async function bootedUefi(firmwareRoot: string): Promise<boolean> {
  return access(join(firmwareRoot, 'sys', 'firmware', 'efi')).then(
    () => true,
    () => false,
  );
}

async function espOf(services: AgentServices, disk: string, uuid?: string) {
  if (!uuid) return findEsp(services, disk);
  await rescanPartitions(disk, services.log);
  const want = uuid.toLowerCase();
  return (
    (await listPartitions(disk, services.log)).find(
      (p) => p.uuid?.toLowerCase() === want || p.partuuid?.toLowerCase() === want,
    ) ?? null
  );
}

async function installWholeDisk(p: BootloaderParams, services: AgentServices): Promise<string> {
  if (p.targetBootMode !== 'uefi') {
    return `nothing to do: the whole-disk image boots in ${p.targetBootMode} mode with its own boot loader`;
  }
  const disk = (await chooseRootDevice(services)).path;
  const esp = await espOf(services, disk, p.espUuid);
  if (!esp)
    return `nothing to do: ${disk} has no EFI system partition${p.espUuid ? ` with UUID ${p.espUuid}` : ''}; the image's firmware setup is used as is`;
  const root = services.config.firmwareRoot;
  if (!root) {
    return `nothing registered: outside the ramdisk (--host-actions=simulated, no --ina-firmware-root) the host's firmware boot entries are left alone; the firmware finds the loader on ${esp.path} itself`;
  }
  if (!(await bootedUefi(root))) {
    return `nothing registered: the ramdisk did not boot in UEFI mode, so firmware boot entries cannot be written; the firmware finds the loader on ${esp.path} itself`;
  }
  if (!(await hasTool('efibootmgr')))
    return `nothing registered: efibootmgr is not available; the firmware finds the loader on ${esp.path} itself`;
  const loaders = await findEfiLoaders(esp.path, services.log);
  if (loaders.length === 0) return `nothing registered: no UEFI boot loader found on ${esp.path}`;
  const done = await registerBootEntries(disk, esp.number, loaders, root, services.log);
  return `boot entries on ${disk} partition ${esp.number}: ${done.join('; ')}`;
}

export const image: Extension = {
  install_bootloader: command<BootloaderParams>({
    mode: 'async',
    parse: (p) => ({
      espUuid: optString(p, 'efi_system_part_uuid'),
      targetBootMode: optString(p, 'target_boot_mode') ?? 'bios',
      ignoreFailure: optBool(p, 'ignore_bootloader_failure'),
    }),
    run: async (p, ctx) => {
      try {
        const result = await installWholeDisk(p, ctx);
        ctx.log.info({ result }, 'install_bootloader');
        return result;
      } catch (err) {
        if (!(p.ignoreFailure ?? ctx.config.ignoreBootloaderFailure)) throw err;
        ctx.log.warn({ err: errorText(err) }, 'boot loader installation failed; ignored as configured');
        return `boot loader installation failed and was ignored as configured: ${errorText(err)}`;
      }
    },
  }),
};
