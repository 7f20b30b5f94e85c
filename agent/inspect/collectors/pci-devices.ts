// `pci_devices`: every device under /sys/bus/pci/devices, ids as hex without `0x`, numa_node as a string.
import type { HostRoot } from '../host-root.ts';

export interface PciDevice {
  vendor_id: string | null;
  product_id: string | null;
  class: string | null;
  revision: string | null;
  bus: string;
  numa_node_id: string | null;
}

const hex = (v: string | null): string | null => (v === null ? null : v.replace(/^0x/i, ''));

export async function readPciDevices(root: HostRoot): Promise<PciDevice[]> {
  const out: PciDevice[] = [];
  for (const bus of await root.list('/sys/bus/pci/devices')) {
    const base = `/sys/bus/pci/devices/${bus}`;
    out.push({
      vendor_id: hex(await root.read(`${base}/vendor`)),
      product_id: hex(await root.read(`${base}/device`)),
      class: hex(await root.read(`${base}/class`)),
      revision: hex(await root.read(`${base}/revision`)),
      bus,
      numa_node_id: await root.read(`${base}/numa_node`),
    });
  }
  return out;
}
