// IPA's `ipa-enable-vlan-interfaces`: VLAN interfaces made before lookup and inspection, so that the inventory
// lists them and lookup sends their MACs. A comma-separated list of entries:
//   <nic>.<vid>  one VLAN on the interface named (by name or MAC, any case); no LLDP needed
//   <nic>        one VLAN per VLAN the switch announced on that interface by LLDP (802.1 "VLAN name" TLVs)
//   all          the same for every interface
// The LLDP forms need `ipa-collect-lldp` (IPA's rule). IPA only makes the link and sets it up: no address, no
// DHCP. Anything that cannot be done is logged and the rest goes on, as in IPA.
import type { Config } from '../config/config.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';
import { liveRoot, type HostRoot } from './host-root.ts';
import { readInterfaces } from './interfaces.ts';
import type { LldpTlv } from './lldp.ts';
import { captureLldp } from './lldp-capture.ts';

export interface Nic {
  name: string;
  mac_address: string;
}

export interface VlanLink {
  parent: string;
  vid: number;
  name: string;
}

export interface VlanPlan {
  create: VlanLink[];
  warnings: string[];
}

/** The 802.1 organisation (00-80-C2), subtype 3 (VLAN name): the VLAN id follows in 2 bytes. */
const VLAN_NAME_TLV = '0080c203';

/** The VLAN ids announced in `tlvs`, in frame order, each once. */
export function lldpVlanIds(tlvs: readonly LldpTlv[]): number[] {
  const out: number[] = [];
  for (const [type, hex] of tlvs) {
    if (type !== 127 || !hex.startsWith(VLAN_NAME_TLV) || hex.length < 12) continue;
    const vid = Number.parseInt(hex.slice(8, 12), 16);
    if (vid >= 1 && vid <= 4094 && !out.includes(vid)) out.push(vid);
  }
  return out;
}

/**
 * What to make for `entries` over `nics`; `lldp` is each NIC's first frame (undefined when LLDP was not collected).
 * Names already present are skipped, as IPA does.
 */
export function planVlans(
  entries: readonly string[],
  nics: readonly Nic[],
  lldp: Readonly<Record<string, LldpTlv[]>> | undefined,
): VlanPlan {
  const plan: VlanPlan = { create: [], warnings: [] };
  const existing = new Set(nics.map((n) => n.name));
  const add = (parent: string, vid: number) => {
    const name = `${parent}.${vid}`;
    if (existing.has(name)) plan.warnings.push(`VLAN interface ${name} has already been added`);
    else if (!plan.create.some((v) => v.name === name)) plan.create.push({ parent, vid, name });
  };
  const fromLldp = (nic: Nic) => {
    const tlvs = lldp?.[nic.name];
    if (!tlvs) plan.warnings.push(`Provided interface name ${nic.name} was not found in the LLDP data`);
    else for (const vid of lldpVlanIds(tlvs)) add(nic.name, vid);
  };
  for (const entry of entries) {
    const dot = entry.indexOf('.');
    if (dot > 0) {
      const want = entry.slice(0, dot).toLowerCase();
      const vidText = entry.slice(dot + 1);
      const nic = nics.find((n) => n.name.toLowerCase() === want || n.mac_address === want);
      const vid = Number(vidText);
      if (!nic) plan.warnings.push(`Provided VLAN interface ${entry} does not exist`);
      else if (!/^\d+$/.test(vidText) || vid < 1 || vid > 4094)
        plan.warnings.push(`Provided VLAN interface ${entry}: the VLAN id must be 1 to 4094`);
      else add(nic.name, vid);
      continue;
    }
    if (!lldp) {
      plan.warnings.push(
        `Attempting to add VLAN interfaces for ${entry} but specific interface not provided and LLDP not enabled (ipa-collect-lldp)`,
      );
      continue;
    }
    // `all`: every NIC that was listened to (VLAN interfaces already there are not parents of more).
    if (entry.toLowerCase() === 'all') for (const nic of nics.filter((n) => lldp[n.name])) fromLldp(nic);
    else {
      const nic = nics.find((n) => n.name.toLowerCase() === entry.toLowerCase());
      if (nic) fromLldp(nic);
      else plan.warnings.push(`Provided interface name ${entry} was not found`);
    }
  }
  return plan;
}

/** Makes and sets up the planned links (`ip link add … type vlan`; one that exists already counts as made, as in IPA). */
export async function createVlans(plan: VlanPlan, log: Logger): Promise<VlanLink[]> {
  for (const w of plan.warnings) log.warn({ param: 'ipa-enable-vlan-interfaces' }, w);
  if (plan.create.length === 0) return [];
  // The ramdisk's kernel has 8021q as a module; a kernel with it built in has no modprobe to ask.
  await run('modprobe', ['-q', '8021q'], { log }).catch(() => undefined);
  const made: VlanLink[] = [];
  for (const v of plan.create) {
    try {
      const add = await run(
        'ip',
        ['link', 'add', 'link', v.parent, 'name', v.name, 'type', 'vlan', 'id', String(v.vid)],
        { log, okCodes: [2] },
      );
      // ip exits 2 both for "exists" and for a kernel without 8021q ("Unknown device type").
      if (add.exitCode === 2) {
        const there = await run('ip', ['link', 'show', 'dev', v.name], { log, query: true }).then(
          () => true,
          () => false,
        );
        if (!there) throw new Error(add.stderr.trim() || 'ip link add exited with 2');
      }
      await run('ip', ['link', 'set', 'dev', v.name, 'up'], { log });
      made.push(v);
    } catch (err) {
      log.warn({ vlan: v.name, err: (err as Error).message }, `could not add VLAN interface ${v.name}`);
    }
  }
  if (made.length > 0) log.info({ vlans: made.map((v) => v.name) }, 'VLAN interfaces added');
  return made;
}

export interface VlanSetup {
  /** ipa-enable-vlan-interfaces, split. */
  entries: readonly string[];
  /** ipa-collect-lldp: whether the LLDP forms (`all`, `<nic>`) may listen for the switch's VLANs. */
  collectLldp: boolean;
  lldpTimeoutS: number;
  log: Logger;
  /** The interfaces to consider (the inventory's, on the live host). */
  nics: () => Promise<Nic[]>;
  /** Listens for LLDP on the named interfaces (lldp-capture.ts's captureLldp on the live host). */
  capture: (names: string[], timeoutS: number) => Promise<{ frames: Record<string, LldpTlv[]> }>;
}

/** IPA's VLAN step of the first inventory: nothing when the parameter is not given. */
export async function enableVlanInterfaces(s: VlanSetup): Promise<VlanLink[]> {
  if (s.entries.length === 0) return [];
  const nics = await s.nics();
  const needsLldp = s.entries.some((e) => !e.includes('.'));
  let lldp: Record<string, LldpTlv[]> | undefined;
  if (needsLldp && s.collectLldp) {
    lldp = (
      await s.capture(
        nics.map((n) => n.name),
        s.lldpTimeoutS,
      )
    ).frames;
  }
  return createVlans(planVlans(s.entries, nics, lldp), s.log);
}

/** The VLAN step on the live host, as configured. */
export function liveVlanSetup(config: Config, log: Logger, root: HostRoot = liveRoot): VlanSetup {
  return {
    entries: config.vlanInterfaces,
    collectLldp: config.inspection.collectLldp,
    lldpTimeoutS: config.inspection.lldpTimeoutS,
    log,
    nics: () => readInterfaces(root, { addresses: {} }),
    capture: (names, timeoutS) => captureLldp(names, { timeoutS, log }),
  };
}
