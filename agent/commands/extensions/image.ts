// image: install_bootloader for whole-disk images. The image brings its own boot loader; in UEFI mode
// the agent registers it with the firmware when it can (ramdisk booted in UEFI mode, efibootmgr present),
// and otherwise succeeds saying why nothing was needed. Outside the ramdisk the firmware is a test's fake
// root (--ina-firmware-root) or left alone: never the host's boot entries. On a software RAID array the
// firmware cannot reach the image's loader, so every holder disk gets an ESP with its files and a boot entry
// (disk/raid-esp.ts). Under BIOS the only way is the image's own grub-install onto every holder, run in a chroot of
// the image (disk/raid-grub.ts): since CVE-2026-43003 only when the operator opts in (enable_bios_bootloader_install),
// and otherwise refused with IPA's error.
import { access } from 'node:fs/promises';
import { join } from 'node:path';
import { optBool, optString } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { errorText, InvalidImage } from '../../errors.ts';
import { hasTool } from '../../exec.ts';
import { registerBootEntries } from '../../disk/efi-boot.ts';
import { findEfiLoaders } from '../../disk/efi-loaders.ts';
import { isMdDevice } from '../../disk/md.ts';
import { buildRaidEsp, raidEntryLabel, raidEspSource } from '../../disk/raid-esp.ts';
import { installRaidGrub } from '../../disk/raid-grub.ts';
import { findEsp } from '../../disk/partition-uuids.ts';
import { listPartitions, rescanPartitions } from '../../disk/partitions.ts';
import { chooseRootDevice } from '../../disk/root-device.ts';
import type { AgentServices, TaskContext } from '../../services.ts';

interface BootloaderParams {
  rootUuid?: string;
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

/** Why firmware boot entries cannot be written from here, or null when they can. */
async function cannotRegister(services: AgentServices): Promise<string | null> {
  const root = services.config.firmwareRoot;
  if (!root)
    return "outside the ramdisk (--host-actions=simulated, no --ina-firmware-root) the host's firmware boot entries are left alone";
  if (!(await bootedUefi(root)))
    return 'the ramdisk did not boot in UEFI mode, so firmware boot entries cannot be written';
  if (!(await hasTool('efibootmgr'))) return 'efibootmgr is not available';
  return null;
}

/**
 * IPA's answer when only grub-install from the image could make the disk bootable (CVE-2026-43003). With the
 * opt-in, what is left here is IPA's UEFI fallback to the image's grub-install, which this agent does not do.
 */
function biosBootloaderRefused(why: string, services: AgentServices): never {
  services.log.error({ why }, 'a boot loader would have to be installed from the image with grub-install');
  if (services.config.enableBiosBootloaderInstall) {
    throw new InvalidImage(
      `${why}: installing the image's GRUB for UEFI (IPA's fallback to grub-install) is not implemented by this agent`,
    );
  }
  throw new InvalidImage(
    'Install of legacy BIOS bootloaders disabled by CONF.enable_bios_bootloader_install as part of CVE-2026-43003 mitigation.',
  );
}

async function installOnRaid(p: BootloaderParams, services: TaskContext, md: string): Promise<string> {
  if (p.targetBootMode !== 'uefi') {
    if (services.config.enableBiosBootloaderInstall) return installRaidGrub(services, md, p.rootUuid ?? null);
    biosBootloaderRefused(
      `${md} is a software RAID array and the instance boots in ${p.targetBootMode} mode`,
      services,
    );
  }
  const why = await cannotRegister(services);
  if (why) biosBootloaderRefused(`${md} is a software RAID array and ${why}`, services);
  const source = await raidEspSource(services, md);
  if (source.loaders.length === 0) {
    biosBootloaderRefused(`no UEFI boot loader on ${source.imageEsp.path}, the image's ESP on ${md}`, services);
  }
  const esp = await buildRaidEsp(services, md);
  const root = services.config.firmwareRoot!;
  const entries: string[] = [];
  // efibootmgr puts each new entry first: the last holder's go in first, so the boot order starts at holder 0.
  for (const [i, h] of [...esp.holders.entries()].reverse()) {
    const loaders = esp.loaders.map((l) => ({ ...l, label: raidEntryLabel(l.label, i) }));
    entries.unshift(
      ...(await registerBootEntries(h.holder, h.partition.number, loaders, root, services.log, h.partition.partuuid)),
    );
  }
  return `EFI system partitions on the holders of ${md} (${esp.holders.map((h) => h.partition.path).join(', ')}, array ${esp.espArray}): ${esp.done.join('; ')}; boot entries: ${entries.join('; ')}`;
}

async function installWholeDisk(p: BootloaderParams, services: TaskContext): Promise<string> {
  const disk = (await chooseRootDevice(services)).path;
  if (isMdDevice(disk)) return installOnRaid(p, services, disk);
  if (p.targetBootMode !== 'uefi') {
    return `nothing to do: the whole-disk image boots in ${p.targetBootMode} mode with its own boot loader`;
  }
  const esp = await espOf(services, disk, p.espUuid);
  if (!esp)
    return `nothing to do: ${disk} has no EFI system partition${p.espUuid ? ` with UUID ${p.espUuid}` : ''}; the image's firmware setup is used as is`;
  const why = await cannotRegister(services);
  if (why) return `nothing registered: ${why}; the firmware finds the loader on ${esp.path} itself`;
  const loaders = await findEfiLoaders(esp.path, services.log);
  if (loaders.length === 0) return `nothing registered: no UEFI boot loader found on ${esp.path}`;
  const done = await registerBootEntries(
    disk,
    esp.number,
    loaders,
    services.config.firmwareRoot!,
    services.log,
    esp.partuuid,
  );
  return `boot entries on ${disk} partition ${esp.number}: ${done.join('; ')}`;
}

export const image: Extension = {
  install_bootloader: command<BootloaderParams>({
    mode: 'async',
    parse: (p) => ({
      rootUuid: optString(p, 'root_uuid'),
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
