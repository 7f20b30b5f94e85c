// The node's static network from OpenStack's network_data.json, which Ironic puts on a virtual-media boot ISO
// when the node has network_data (a network without DHCP). In IPA's images glean reads it; here the ramdisk's
// /init runs this plan before any DHCP client starts (docs/ipa-compat.md, "Virtual media"). Parsed once, with
// a clear refusal for anything malformed; turned into `ip` commands by a pure function the tests run as is.
import { isIP } from 'node:net';
import { isObject, parseWholeNumber } from '../parse.ts';

export interface Link {
  id: string;
  type: string;
  mac?: string;
  mtu?: number;
  bondLinks?: string[];
  bondMode?: string;
  bondMiimon?: number;
  bondHashPolicy?: string;
  vlanLink?: string;
  vlanId?: number;
}

export interface Network {
  type: string;
  link: string;
  address?: string;
  prefix?: number;
  routes: { network: string; prefix: number; gateway: string }[];
  dns: string[];
}

export interface NetworkData {
  links: Link[];
  networks: Network[];
  dns: string[];
}

export class NetworkDataError extends Error {}

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;
/** Static address types; every other type (ipv4_dhcp, ipv6_dhcp, ipv6_slaac…) is left to DHCP or the kernel. */
const STATIC = new Set(['ipv4', 'ipv6']);

function fail(where: string, what: string): never {
  throw new NetworkDataError(`network_data.json: ${where}: ${what}`);
}

function str(o: Record<string, unknown>, key: string, where: string): string | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') fail(where, `${key} must be a string`);
  return v;
}

function int(o: Record<string, unknown>, key: string, where: string): number | undefined {
  const v = o[key];
  if (v === undefined || v === null) return undefined;
  return parseWholeNumber(v, 0) ?? fail(where, `${key} must be a whole number`);
}

/** The prefix length of a netmask (dotted IPv4 or IPv6); its bits must be contiguous. */
export function prefixOf(mask: string, where: string): number {
  let bits: string;
  if (isIP(mask) === 4) {
    bits = mask
      .split('.')
      .map((p) => Number(p).toString(2).padStart(8, '0'))
      .join('');
  } else if (isIP(mask) === 6) {
    const [head = '', tail] = mask.split('::');
    const part = (s: string) => (s ? s.split(':') : []);
    const groups =
      tail === undefined
        ? part(head)
        : [...part(head), ...Array(8 - part(head).length - part(tail).length).fill('0'), ...part(tail)];
    bits = groups.map((g) => parseInt(g, 16).toString(2).padStart(16, '0')).join('');
  } else {
    return fail(where, `netmask ${JSON.stringify(mask)} is not an address mask`);
  }
  if (!/^1*0*$/.test(bits)) fail(where, `netmask ${mask} is not contiguous`);
  return bits.indexOf('0') === -1 ? bits.length : bits.indexOf('0');
}

function parseRoute(v: unknown, where: string): Network['routes'][number] {
  if (!isObject(v)) fail(where, 'a route must be an object');
  const network = str(v, 'network', where);
  const netmask = str(v, 'netmask', where);
  const gateway = str(v, 'gateway', where);
  if (!network || !isIP(network)) fail(where, 'a route needs a network address');
  if (!gateway || !isIP(gateway)) fail(where, 'a route needs a gateway address');
  return { network, prefix: netmask ? prefixOf(netmask, where) : isIP(network) === 4 ? 32 : 128, gateway };
}

function parseNetwork(v: unknown, i: number): Network {
  const where = `networks[${i}]`;
  if (!isObject(v)) fail(where, 'must be an object');
  const type = str(v, 'type', where) ?? fail(where, 'type is missing');
  const link = str(v, 'link', where) ?? fail(where, 'link is missing');
  const routes =
    v.routes === undefined ? [] : Array.isArray(v.routes) ? v.routes : fail(where, 'routes must be a list');
  const dns = v.dns_nameservers === undefined ? [] : v.dns_nameservers;
  if (!Array.isArray(dns) || !dns.every((d) => typeof d === 'string' && isIP(d)))
    fail(where, 'dns_nameservers must be addresses');
  const net: Network = { type, link, routes: routes.map((r) => parseRoute(r, where)), dns: dns as string[] };
  if (!STATIC.has(type)) return net;
  const given = str(v, 'ip_address', where) ?? fail(where, `a ${type} network needs ip_address`);
  const [address = '', inline] = given.split('/');
  const family = type === 'ipv4' ? 4 : 6;
  if (isIP(address) !== family) fail(where, `ip_address ${given} is not an IPv${family} address`);
  const netmask = str(v, 'netmask', where);
  const prefix =
    inline !== undefined
      ? parseWholeNumber(inline, 0, family === 4 ? 32 : 128)
      : netmask
        ? prefixOf(netmask, where)
        : undefined;
  if (prefix === undefined) fail(where, `${given} needs a netmask or a prefix length`);
  return { ...net, address, prefix };
}

function parseLink(v: unknown, i: number): Link {
  const where = `links[${i}]`;
  if (!isObject(v)) fail(where, 'must be an object');
  const id = str(v, 'id', where) ?? fail(where, 'id is missing');
  const type = str(v, 'type', where) ?? 'phy';
  // Ironic's schema allows `-` between the octets too.
  const mac = (str(v, 'ethernet_mac_address', where) ?? str(v, 'vlan_mac_address', where))
    ?.toLowerCase()
    .replaceAll('-', ':');
  if (mac !== undefined && !MAC.test(mac)) fail(where, `${mac} is not a MAC address`);
  const link: Link = { id, type, mac, mtu: int(v, 'mtu', where) };
  if (type === 'bond') {
    const members = v.bond_links;
    if (!Array.isArray(members) || members.length === 0 || !members.every((m) => typeof m === 'string'))
      fail(where, 'a bond needs bond_links, a list of link ids');
    return {
      ...link,
      bondLinks: members as string[],
      bondMode: str(v, 'bond_mode', where) ?? 'active-backup',
      bondMiimon: int(v, 'bond_miimon', where),
      bondHashPolicy: str(v, 'bond_xmit_hash_policy', where),
    };
  }
  if (type === 'vlan') {
    const vlanId = int(v, 'vlan_id', where);
    if (vlanId === undefined || vlanId < 1 || vlanId > 4094) fail(where, 'a vlan needs vlan_id 1..4094');
    return { ...link, vlanLink: str(v, 'vlan_link', where) ?? fail(where, 'a vlan needs vlan_link'), vlanId };
  }
  if (mac === undefined) fail(where, `a ${type} link needs ethernet_mac_address`);
  return link;
}

export function parseNetworkData(v: unknown): NetworkData {
  if (!isObject(v)) fail('the document', 'must be an object');
  const list = (key: string) =>
    v[key] === undefined ? [] : Array.isArray(v[key]) ? v[key] : fail(key, 'must be a list');
  const links = list('links').map(parseLink);
  const ids = new Set<string>();
  for (const l of links) {
    if (ids.has(l.id)) fail('links', `two links have the id ${l.id}`);
    ids.add(l.id);
  }
  const networks = list('networks').map(parseNetwork);
  for (const [i, n] of networks.entries()) if (!ids.has(n.link)) fail(`networks[${i}]`, `no link has the id ${n.link}`);
  const dns = list('services')
    .filter((s) => isObject(s) && s.type === 'dns' && typeof s.address === 'string' && isIP(s.address))
    .map((s) => (s as { address: string }).address);
  return { links, networks, dns };
}

/** One change: an `ip` command, or a write into /sys/class/net (bonds: busybox `ip` drops their options). */
export type Step = { ip: string[] } | { sysfs: string; value: string };

export interface Plan {
  steps: Step[];
  /** Every device the document names and this machine has (NICs, bonds, VLANs): no DHCP client for them unless
   * they carry an ipv4_dhcp network. */
  configured: string[];
  /** The bonds and VLANs the plan creates: undone when a step fails. */
  created: string[];
  nameservers: string[];
  /** Links that name a NIC this machine does not have, with why. */
  skipped: string[];
}

const IFNAME = /^[A-Za-z0-9_.-]{1,15}$/;

/** The MTU a link needs: its own, and at least that of every VLAN on it and of a bond's members. */
function mtuOf(link: Link, all: readonly Link[]): number {
  const children = all.filter((l) => l.type === 'vlan' && l.vlanLink === link.id);
  const members = all.filter((l) => link.bondLinks?.includes(l.id));
  return Math.max(link.mtu ?? 0, ...children.map((c) => mtuOf(c, all)), ...members.map((m) => m.mtu ?? 0));
}

/** The steps that give `nics` (name → MAC) the links and static networks of `data`. */
export function planNetwork(data: NetworkData, nics: ReadonlyMap<string, string>): Plan {
  const plan: Plan = { steps: [], configured: [], created: [], nameservers: [], skipped: [] };
  const byMac = new Map([...nics].map(([name, mac]) => [mac.toLowerCase(), name]));
  const device = new Map<string, string>();
  const ip = (...args: string[]) => plan.steps.push({ ip: args });
  const sysfs = (path: string, value: string) => plan.steps.push({ sysfs: path, value });
  const mtu = (l: Link, name: string) => {
    const m = mtuOf(l, data.links);
    if (m > 0) ip('link', 'set', 'dev', name, 'mtu', String(m));
  };
  const members = new Set(data.links.flatMap((l) => l.bondLinks ?? []));
  for (const l of data.links.filter((x) => x.type !== 'bond' && x.type !== 'vlan')) {
    const name = byMac.get(l.mac!);
    if (!name) {
      plan.skipped.push(`link ${l.id}: no NIC has the MAC ${l.mac}`);
      continue;
    }
    device.set(l.id, name);
    // A bond member takes the bond's MTU when it is enslaved.
    if (!members.has(l.id)) mtu(l, name);
  }
  for (const [n, l] of data.links.filter((x) => x.type === 'bond').entries()) {
    const ports = l.bondLinks!.map((id) => device.get(id));
    if (ports.some((m) => m === undefined)) {
      plan.skipped.push(`bond ${l.id}: a member link names no NIC here`);
      continue;
    }
    const name = IFNAME.test(l.id) ? l.id : `bond${n}`;
    sysfs('bonding_masters', `+${name}`);
    plan.created.push(name);
    // Mode and hash policy only while the bond has no members.
    sysfs(`${name}/bonding/mode`, l.bondMode!);
    if (l.bondMiimon !== undefined) sysfs(`${name}/bonding/miimon`, String(l.bondMiimon));
    if (l.bondHashPolicy) sysfs(`${name}/bonding/xmit_hash_policy`, l.bondHashPolicy);
    if (l.mac) ip('link', 'set', 'dev', name, 'address', l.mac);
    for (const m of ports as string[]) {
      ip('link', 'set', 'dev', m, 'down');
      sysfs(`${name}/bonding/slaves`, `+${m}`);
    }
    mtu(l, name);
    device.set(l.id, name);
  }
  for (const l of data.links.filter((x) => x.type === 'vlan')) {
    const parent = device.get(l.vlanLink!);
    if (!parent) {
      plan.skipped.push(`vlan ${l.id}: its link ${l.vlanLink} names no NIC here`);
      continue;
    }
    const name = `${parent}.${l.vlanId}`.slice(-15);
    ip('link', 'add', 'link', parent, 'name', name, 'type', 'vlan', 'id', String(l.vlanId));
    plan.created.push(name);
    if (l.mac) ip('link', 'set', 'dev', name, 'address', l.mac);
    mtu(l, name);
    device.set(l.id, name);
  }
  for (const name of new Set(device.values())) ip('link', 'set', 'dev', name, 'up');
  const dhcp = new Set<string>();
  const defaults = new Set<string>();
  for (const n of data.networks) {
    const name = device.get(n.link);
    if (!name) continue;
    if (n.type === 'ipv4_dhcp') dhcp.add(name);
    if (n.address === undefined) continue;
    const family = n.type === 'ipv4' ? '-4' : '-6';
    ip(family, 'addr', 'add', `${n.address}/${n.prefix}`, 'dev', name);
    for (const r of n.routes) {
      if (r.prefix === 0 && defaults.has(family)) {
        // One default route per family: the first network's, as the document lists them.
        plan.skipped.push(`network on ${n.link}: a second default route (via ${r.gateway}) left out`);
        continue;
      }
      if (r.prefix === 0) defaults.add(family);
      const dest = r.prefix === 0 ? 'default' : `${r.network}/${r.prefix}`;
      ip(family, 'route', 'replace', dest, 'via', r.gateway, 'dev', name);
    }
    plan.nameservers.push(...n.dns);
  }
  plan.configured = [...new Set(device.values())].filter((name) => !dhcp.has(name));
  plan.nameservers = [...new Set([...plan.nameservers, ...data.dns])];
  return plan;
}
