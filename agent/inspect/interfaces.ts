// `interfaces` of the inventory, as IPA lists them: every name under /sys/class/net that is a physical
// NIC (has a `device` link), a bond (has `bonding/`) or a VLAN (`<name>.<vid>`); `lo`, bridges, veths
// and the like are left out, and so is any interface whose MAC starts with `fa:` (IPA drops those).
import { networkInterfaces, type NetworkInterfaceInfo } from 'node:os';
import type { HostRoot } from './host-root.ts';
import type { LldpTlv } from './lldp.ts';

export interface InterfaceInfo {
  name: string;
  mac_address: string;
  ipv4_address: string | null;
  ipv6_address: string | null;
  has_carrier: boolean;
  lldp: LldpTlv[] | null;
  vendor: string | null;
  product: string | null;
  client_id: string | null;
  biosdevname: string | null;
  speed_mbps: number | null;
  pci_address: string | null;
  driver: string | null;
}

export type AddressMap = Record<string, NetworkInterfaceInfo[] | undefined>;

export interface InterfaceSources {
  /** Addresses per interface name (os.networkInterfaces() on the live host, a recording in tests). */
  addresses?: AddressMap;
  /** LLDP TLVs per interface, when `ipa-collect-lldp` asked for them in the inventory. */
  lldp?: Record<string, LldpTlv[]>;
  /** `biosdevname -i <name>`; absent when the tool is not installed (the ramdisk has none). */
  biosdevname?: (name: string) => Promise<string | null>;
}

const ARPHRD_INFINIBAND = '32';
const MELLANOX = '0x15b3';
/** IPA's Mellanox manager: DHCP client-id prefix an IPoIB port is known by in Ironic. */
const IB_CLIENT_ID_PREFIX = 'ff:00:00:00:00:00:02:00:00:02:c9:00:';
const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;

export const isVlanName = (name: string): boolean => /^.+\.\d+$/.test(name);

/** Interface names IPA considers, sorted. */
export async function candidateNames(root: HostRoot): Promise<string[]> {
  const out: string[] = [];
  for (const name of await root.list('/sys/class/net')) {
    if (name === 'lo') continue;
    const base = `/sys/class/net/${name}`;
    if (isVlanName(name) || (await root.exists(`${base}/device`)) || (await root.exists(`${base}/bonding`)))
      out.push(name);
  }
  return out;
}

/** Bond members report the bond's MAC; /proc/net/bonding keeps each member's own ("Permanent HW addr"). */
export async function bondPermanentMacs(root: HostRoot): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const bond of await root.list('/proc/net/bonding')) {
    let slave: string | undefined;
    for (const line of ((await root.read(`/proc/net/bonding/${bond}`)) ?? '').split('\n')) {
      const s = /^Slave Interface:\s*(\S+)/.exec(line);
      if (s) slave = s[1];
      const p = /^Permanent HW addr:\s*(\S+)/.exec(line);
      if (p && slave) out.set(slave, p[1]!.toLowerCase());
    }
  }
  return out;
}

/**
 * An IPoIB hardware address is 20 bytes; the port GUID is its last 8. Ironic knows the port by a MAC made of the GUID
 * without its middle two bytes.
 */
export function infinibandIds(address: string): { mac: string; clientId: string } | null {
  const bytes = address.toLowerCase().split(':');
  if (bytes.length !== 20) return null;
  const guid = bytes.slice(12);
  return { mac: [...guid.slice(0, 3), ...guid.slice(5)].join(':'), clientId: IB_CLIENT_ID_PREFIX + guid.join(':') };
}

function firstAddress(list: NetworkInterfaceInfo[] | undefined, name: string, family: 'IPv4' | 'IPv6'): string | null {
  const a = list?.find((x) => x.family === family);
  if (!a) return null;
  // psutil (IPA) names the zone of a link-local address; Ironic strips it.
  return family === 'IPv6' && a.address.toLowerCase().startsWith('fe80:') ? `${a.address}%${name}` : a.address;
}

export async function readInterfaces(root: HostRoot, src: InterfaceSources = {}): Promise<InterfaceInfo[]> {
  const addresses = src.addresses ?? (root.dir === '/' ? networkInterfaces() : {});
  const permanent = await bondPermanentMacs(root);
  const out: InterfaceInfo[] = [];
  for (const name of await candidateNames(root)) {
    const base = `/sys/class/net/${name}`;
    const address = ((await root.read(`${base}/address`)) ?? '').toLowerCase();
    const vendor = await root.read(`${base}/device/vendor`);
    let mac = permanent.get(name) ?? address;
    let clientId: string | null = null;
    if ((await root.read(`${base}/type`)) === ARPHRD_INFINIBAND && vendor === MELLANOX) {
      const ib = infinibandIds(address);
      if (ib) ({ mac, clientId } = { mac: ib.mac, clientId: ib.clientId });
    }
    if (!MAC.test(mac) || mac === '00:00:00:00:00:00' || mac.startsWith('fa:')) continue;
    const speed = Number(await root.read(`${base}/speed`));
    out.push({
      name,
      mac_address: mac,
      ipv4_address: firstAddress(addresses[name], name, 'IPv4'),
      ipv6_address: firstAddress(addresses[name], name, 'IPv6'),
      has_carrier: (await root.read(`${base}/carrier`)) === '1',
      lldp: src.lldp?.[name] ?? null,
      vendor,
      product: await root.read(`${base}/device/device`),
      client_id: clientId,
      biosdevname: src.biosdevname && !isVlanName(name) ? await src.biosdevname(name) : null,
      speed_mbps: speed > 0 ? speed : null,
      pci_address: await root.linkName(`${base}/device`),
      driver: await root.linkName(`${base}/device/driver`),
    });
  }
  return out;
}
