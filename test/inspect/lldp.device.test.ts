// LLDP: TLVs from frames in a pcap recorded with tcpdump (test/fixtures/inspect/lldp/leaf.pcap, two switch
// ports' frames sent over a veth pair), and the live capture: the agent's own helper (lldp-listen.c) in a network
// namespace this test creates, real LLDP frames built by scapy sent into its veths from the other end, and the
// VLAN interfaces ipa-enable-vlan-interfaces makes from them over those veths.
import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { readFile, rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { HostRoot } from '../../agent/inspect/host-root.ts';
import { readInterfaces } from '../../agent/inspect/interfaces.ts';
import { describeLldp, parseLldpFrame, pcapPackets } from '../../agent/inspect/lldp.ts';
import { captureLldp, LLDP_HELPER, parseHelperOutput } from '../../agent/inspect/lldp-capture.ts';
import { lldpVlanIds, planVlans } from '../../agent/inspect/vlans.ts';
import { switchFrame } from '../helpers/lldp-frames.ts';
import { buildTree } from '../helpers/sys-tree.ts';

const PCAP = join(import.meta.dirname, '..', 'fixtures/inspect/lldp/leaf.pcap');

describe('LLDP frames from a recorded capture', () => {
  it("gives IPA's [type, hex] list up to and including End", async () => {
    const packets = pcapPackets(await readFile(PCAP));
    expect(packets).toHaveLength(2);
    const tlvs = parseLldpFrame(packets[0]!);
    expect(tlvs.map(([t]) => t)).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 127, 127, 127, 0]);
    expect(tlvs[0]).toEqual([1, '04001c73aabb01']);
    expect(tlvs.at(-1)).toEqual([0, '']);
    expect(describeLldp(tlvs)).toEqual({
      chassisId: '00:1c:73:aa:bb:01',
      portId: 'Ethernet12',
      systemName: 'leaf-a1.dc1',
    });
    expect(describeLldp(parseLldpFrame(packets[1]!))).toMatchObject({
      portId: 'Ethernet13',
      systemName: 'leaf-a2.dc1',
    });
  });

  it('ignores a runt frame and a truncated TLV; rejects a stream that is not pcap', () => {
    expect(parseLldpFrame(Buffer.alloc(10))).toEqual([]);
    const { frame } = switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'x', vlan: 1 });
    expect(parseLldpFrame(frame.subarray(0, 20))).toEqual([]);
    expect(() => pcapPackets(Buffer.alloc(40, 1))).toThrow(/not a pcap/);
  });
});

describe('the LLDP helper output and the VLAN plan', () => {
  it('reads frame, none and error lines; an interface the helper did not mention is an error', () => {
    const { frame: f, tlvs } = switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'x', vlan: 7 });
    const got = parseHelperOutput(
      ['a', 'b', 'c', 'd'],
      `a frame ${f.toString('hex')}\nb none\nc error bind: Network is down\nzz none\n`,
    );
    expect(got.frames).toEqual({ a: tlvs, b: [] });
    expect(got.errors).toEqual({ c: 'bind: Network is down', d: 'no answer from the helper' });
  });

  it("follows IPA's rules for nic.vid, nic and all", () => {
    const lldp = {
      eth0: switchFrame({ src: '00:1c:73:aa:bb:01', port: 'Ethernet12', system: 'x', vlan: 100 }).tlvs,
      eth1: [],
    };
    expect(lldpVlanIds(lldp.eth0)).toEqual([100]);
    const nics = [
      { name: 'eth0', mac_address: '52:54:00:00:00:01' },
      { name: 'eth1', mac_address: '52:54:00:00:00:02' },
      { name: 'eth0.100', mac_address: '52:54:00:00:00:01' },
    ];
    const plan = planVlans(['all', '52:54:00:00:00:02.300', 'ETH1.301', 'eth9.5', 'eth1.5000', 'eth7'], nics, lldp);
    expect(plan.create.map((v) => v.name)).toEqual(['eth1.300', 'eth1.301']);
    expect(plan.warnings).toEqual([
      'VLAN interface eth0.100 has already been added',
      'Provided VLAN interface eth9.5 does not exist',
      'Provided VLAN interface eth1.5000: the VLAN id must be 1 to 4094',
      'Provided interface name eth7 was not found',
    ]);
    // Without ipa-collect-lldp only the explicit form works, as in IPA.
    const noLldp = planVlans(['all', 'eth0.10'], nics, undefined);
    expect(noLldp.create.map((v) => v.name)).toEqual(['eth0.10']);
    expect(noLldp.warnings[0]).toMatch(/LLDP not enabled/);
  });
});

const NS = `ina-lldp-${process.pid}`;
const SENDER = join(import.meta.dirname, '../helpers/lldp-send.py');
const haveTools = (() => {
  try {
    execFileSync('sh', ['-c', 'command -v ip && /usr/bin/python3 -c "import scapy.contrib.lldp"'], {
      stdio: 'ignore',
    });
    execFileSync('bash', [join(import.meta.dirname, '../../scripts/build-lldp-listen.sh')]);
    return process.getuid?.() === 0;
  } catch {
    return false;
  }
})();
if (!haveTools) console.warn('skipping live LLDP capture: needs root, ip, gcc and python3-scapy');

describe.skipIf(!haveTools)('live capture in a network namespace, frames from scapy', () => {
  const inNs = (...args: string[]) => execFileSync('ip', ['netns', 'exec', NS, ...args], { encoding: 'utf8' });
  const senders: ChildProcess[] = [];
  /** Whether this kernel makes VLAN links (8021q built in or loaded); the test host's may not. */
  let vlanKernel = false;
  beforeAll(() => {
    execFileSync('ip', ['netns', 'add', NS]);
    inNs('ip', 'link', 'add', 'sw0', 'type', 'veth', 'peer', 'name', 'nic0');
    inNs('ip', 'link', 'add', 'sw1', 'type', 'veth', 'peer', 'name', 'nic1');
    for (const l of ['sw0', 'nic0', 'sw1', 'nic1']) inNs('ip', 'link', 'set', l, 'up');
    try {
      inNs('ip', 'link', 'add', 'link', 'sw0', 'name', 'probe.9', 'type', 'vlan', 'id', '9');
      inNs('ip', 'link', 'del', 'probe.9');
      vlanKernel = true;
    } catch {
      vlanKernel = false;
    }
  });
  afterAll(() => {
    for (const s of senders) s.kill();
    execFileSync('ip', ['netns', 'del', NS]);
  });

  /** Starts scapy sending a switch port's frames out of `iface`; resolves to the frame's bytes. */
  function sender(iface: string, chassis: string, port: string, system: string, vlans: number[]): Promise<Buffer> {
    const child = spawn(
      'ip',
      ['netns', 'exec', NS, '/usr/bin/python3', SENDER, iface, chassis, port, system, vlans.join(',')],
      {
        stdio: ['ignore', 'pipe', 'inherit'],
      },
    );
    senders.push(child);
    return new Promise((resolve, reject) => {
      let out = '';
      child.stdout!.on('data', (c: Buffer) => {
        out += c.toString();
        const line = out.split('\n');
        if (line.length > 1) resolve(Buffer.from(line[0]!, 'hex'));
      });
      child.on('exit', (code) => reject(new Error(`the LLDP sender exited with ${code}`)));
    });
  }

  it('takes the first frame per interface, [] for a silent one, an error for one that cannot be opened', async () => {
    const sent = await sender('sw0', '00:1c:73:aa:bb:01', 'Ethernet12', 'leaf-a1.dc1', [100, 200]);
    const command = ['ip', 'netns', 'exec', NS, LLDP_HELPER];
    const got = await captureLldp(['nic0', 'nic1', 'nosuch0'], { timeoutS: 5, command });
    expect(got.frames).toEqual({ nic0: parseLldpFrame(sent), nic1: [] });
    expect(got.errors).toEqual({ nosuch0: 'no such interface: No such device' });
    const tlvs = got.frames.nic0!;
    expect(describeLldp(tlvs)).toEqual({
      chassisId: '00:1c:73:aa:bb:01',
      portId: 'Ethernet12',
      systemName: 'leaf-a1.dc1',
    });
    // chassis id subtype 4 (MAC), port id subtype 5 (interface name): what local_link_connection reads
    expect(tlvs[0]).toEqual([1, '04001c73aabb01']);
    expect(tlvs[1]).toEqual([2, `05${Buffer.from('Ethernet12').toString('hex')}`]);
    expect(lldpVlanIds(tlvs)).toEqual([100, 200]);
    expect(tlvs.at(-1)).toEqual([0, '']);
    // What the inventory carries for the NIC with ipa-collect-lldp: these TLVs, as they came (a NIC in the kernel's
    // sysfs layout stands for nic0, which as a veth is no NIC to IPA).
    const pci = '0000:00:03.0';
    const tree = await buildTree({
      'sys/class/net/eth0': { link: `../../devices/pci0000:00/${pci}/net/eth0` },
      [`sys/devices/pci0000:00/${pci}/net/eth0/address`]: '52:54:00:12:34:56\n',
      [`sys/devices/pci0000:00/${pci}/net/eth0/device`]: { link: `../../../${pci}` },
    });
    try {
      const [eth0] = await readInterfaces(new HostRoot(tree), { addresses: {}, lldp: { eth0: tlvs } });
      expect(eth0).toMatchObject({ name: 'eth0', mac_address: '52:54:00:12:34:56', lldp: tlvs });
    } finally {
      await rm(tree, { recursive: true, force: true });
    }
    // the sender's own frames leaving sw0 are not taken as a neighbour's
    const own = await captureLldp(['sw0'], { timeoutS: 1, command });
    expect(own.frames).toEqual({ sw0: [] });
    const absent = await captureLldp(['nic0'], { timeoutS: 1, command: [join(import.meta.dirname, 'absent')] });
    expect(absent.frames).toEqual({});
    expect(absent.errors.nic0).toMatch(/not installed/);
  });

  it('ipa-enable-vlan-interfaces: all from LLDP, nic.vid by MAC; the inventory lists them with lldp', async () => {
    await sender('sw1', '00:1c:73:aa:bb:02', 'Ethernet13', 'leaf-a2.dc1', [300]);
    const mac1 = inNs('cat', '/sys/class/net/nic1/address').trim();
    const script = join(import.meta.dirname, '../helpers/netns-vlans.ts');
    const args = JSON.stringify({
      entries: ['all', `${mac1.toUpperCase()}.42`],
      collectLldp: true,
      nics: ['nic0', 'nic1'],
    });
    const out = execFileSync(
      'ip',
      ['netns', 'exec', NS, join(import.meta.dirname, '../../scripts/node.sh'), '--import', 'tsx', script, args],
      { encoding: 'utf8' },
    );
    const result = JSON.parse(
      out
        .split('\n')
        .find((l) => l.startsWith('RESULT '))!
        .slice(7),
    ) as {
      made: { name: string; vid: number; parent: string }[];
      interfaces: { name: string; mac_address: string; lldp: unknown }[];
      frames: Record<string, [number, string][]>;
    };
    expect(lldpVlanIds(result.frames.nic1!)).toEqual([300]);
    const planned = ['nic0.100', 'nic0.200', 'nic1.300', 'nic1.42'];
    if (!vlanKernel) {
      // This kernel cannot make VLANs: each one is reported by name with ip's reason, none is claimed made.
      expect(result.made).toEqual([]);
      for (const name of planned) expect(out).toContain(`could not add VLAN interface ${name}`);
      expect(out).toMatch(/Unknown device type/);
      console.warn('VLAN creation not checked for real: this kernel has no 8021q (the QEMU e2e checks it)');
      return;
    }
    expect(result.made.map((v) => v.name).sort()).toEqual(planned);
    for (const v of result.made) {
      const link = JSON.parse(inNs('ip', '-d', '-j', 'link', 'show', 'dev', v.name))[0];
      expect(link.link).toBe(v.parent);
      expect(link.linkinfo.info_kind).toBe('vlan');
      expect(link.linkinfo.info_data.id).toBe(v.vid);
      expect(link.flags).toContain('UP');
    }
    // veths are not NICs to IPA; their VLAN interfaces are (by name), with the parent's MAC for lookup
    const byName = Object.fromEntries(result.interfaces.map((i) => [i.name, i]));
    expect(Object.keys(byName).sort()).toEqual(planned);
    expect(byName['nic1.42']!.mac_address).toBe(mac1);
    // a second run changes nothing: the names exist already
    const again = execFileSync(
      'ip',
      ['netns', 'exec', NS, join(import.meta.dirname, '../../scripts/node.sh'), '--import', 'tsx', script, args],
      { encoding: 'utf8' },
    );
    expect(again).toMatch(/VLAN interface nic0.100 has already been added/);
  });
});
