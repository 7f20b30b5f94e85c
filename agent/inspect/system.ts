// `system_vendor`, `boot` and `hostname` of the inventory. The DMI strings are the ones lshw reports
// (product, serial, vendor, and the BIOS as `firmware`); the kernel already decodes them into
// /sys/class/dmi/id. Machines without DMI (many ARM boards) get IPA's empty strings.
import type { HostRoot } from './host-root.ts';

export interface SystemVendor {
  product_name: string;
  serial_number: string;
  manufacturer: string;
  firmware: { vendor: string; version: string; build_date: string };
}

export interface BootInfo {
  current_boot_mode: 'uefi' | 'bios';
  pxe_interface: string | null;
}

export async function readSystemVendor(root: HostRoot): Promise<SystemVendor> {
  const dmi = async (name: string) => (await root.read(`/sys/class/dmi/id/${name}`)) ?? '';
  const sku = await dmi('product_sku');
  return {
    // lshw (IPA's source) appends a non-empty SKU in parentheses: "PowerEdge R640 (SKU=…;ModelName=…)".
    // Inspection rules and earlier inventories compare the whole string.
    product_name: (await dmi('product_name')) + (sku ? ` (${sku})` : ''),
    serial_number: await dmi('product_serial'),
    manufacturer: await dmi('sys_vendor'),
    firmware: {
      vendor: await dmi('bios_vendor'),
      version: await dmi('bios_version'),
      build_date: await dmi('bios_date'),
    },
  };
}

/** `pxe_interface` is BOOTIF exactly as given (`01-aa-bb-…`); Ironic normalises it. */
export async function readBoot(root: HostRoot, bootif: string | undefined): Promise<BootInfo> {
  return {
    current_boot_mode: (await root.exists('/sys/firmware/efi')) ? 'uefi' : 'bios',
    pxe_interface: bootif ?? null,
  };
}

export async function readHostname(root: HostRoot): Promise<string> {
  return (await root.read('/proc/sys/kernel/hostname')) ?? 'localhost';
}
