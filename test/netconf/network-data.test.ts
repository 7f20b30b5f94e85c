// The static network of a virtual-media boot (agent/netconf): the plan from network_data.json and its
// refusals. netns.device.test.ts applies it for real.
import { describe, expect, it } from 'vitest';
import { DOC, MAC_A, MAC_B, MAC_C } from '../helpers/network-data-doc.ts';
import { parseNetworkData, planNetwork } from '../../agent/netconf/network-data.ts';

describe('network_data.json (virtual media without DHCP)', () => {
  it('plans the bond, the VLAN on it, the static addresses and routes, and leaves DHCP networks and absent NICs alone', () => {
    const nics = new Map([
      ['eno1', MAC_A],
      ['eno2', MAC_B],
      ['eno3', MAC_C],
    ]);
    const plan = planNetwork(parseNetworkData(DOC), nics);
    const ip = (...args: string[]) => ({ ip: args });
    const sysfs = (path: string, value: string) => ({ sysfs: path, value });
    expect(plan.steps).toEqual([
      // Bonds through sysfs: busybox's ip (the ramdisk's) drops a bond's mode and options.
      sysfs('bonding_masters', '+bond0'),
      sysfs('bond0/bonding/mode', '802.3ad'),
      sysfs('bond0/bonding/miimon', '100'),
      ip('link', 'set', 'dev', 'bond0', 'address', MAC_A),
      ip('link', 'set', 'dev', 'eno1', 'down'),
      sysfs('bond0/bonding/slaves', '+eno1'),
      ip('link', 'set', 'dev', 'eno2', 'down'),
      sysfs('bond0/bonding/slaves', '+eno2'),
      // A member's MTU goes to the bond, which its members then take.
      ip('link', 'set', 'dev', 'bond0', 'mtu', '9000'),
      ip('link', 'add', 'link', 'bond0', 'name', 'bond0.101', 'type', 'vlan', 'id', '101'),
      ip('link', 'set', 'dev', 'bond0.101', 'address', MAC_A),
      ip('link', 'set', 'dev', 'eno1', 'up'),
      ip('link', 'set', 'dev', 'eno2', 'up'),
      ip('link', 'set', 'dev', 'eno3', 'up'),
      ip('link', 'set', 'dev', 'bond0', 'up'),
      ip('link', 'set', 'dev', 'bond0.101', 'up'),
      ip('-4', 'addr', 'add', '192.0.2.10/24', 'dev', 'bond0'),
      ip('-4', 'route', 'replace', 'default', 'via', '192.0.2.1', 'dev', 'bond0'),
      ip('-6', 'addr', 'add', '2001:db8::10/64', 'dev', 'bond0.101'),
      ip('-6', 'route', 'replace', '2001:db8:1::/64', 'via', '2001:db8::1', 'dev', 'bond0.101'),
    ]);
    // eno3's network is DHCP: /init starts a client for it. Every other device the document names gets none.
    expect(plan.configured).toEqual(['eno1', 'eno2', 'bond0', 'bond0.101']);
    expect(plan.created).toEqual(['bond0', 'bond0.101']);
    expect(plan.nameservers).toEqual(['192.0.2.53', '198.51.100.53']);
    expect(plan.skipped).toEqual(['link port-gone: no NIC has the MAC 52:54:00:aa:00:09']);
  });

  it('keeps the first default route of a family when two networks give one', () => {
    const second = {
      ...DOC.networks[0],
      link: 'port-c',
      ip_address: '198.51.100.7',
      routes: [{ network: '0.0.0.0', netmask: '0.0.0.0', gateway: '198.51.100.1' }],
    };
    const plan = planNetwork(
      parseNetworkData({ ...DOC, networks: [DOC.networks[0], second] }),
      new Map([
        ['eno1', MAC_A],
        ['eno2', MAC_B],
        ['eno3', MAC_C],
      ]),
    );
    const defaults = plan.steps.filter((s) => 'ip' in s && s.ip.includes('default'));
    expect(defaults).toEqual([{ ip: ['-4', 'route', 'replace', 'default', 'via', '192.0.2.1', 'dev', 'bond0'] }]);
    expect(plan.skipped).toContain('network on port-c: a second default route (via 198.51.100.1) left out');
  });

  it("raises a VLAN's parent to the VLAN's MTU, and reads MACs written with dashes", () => {
    const doc = {
      links: [
        { id: 'p', type: 'phy', ethernet_mac_address: MAC_A.replaceAll(':', '-'), mtu: 1500 },
        { id: 'v', type: 'vlan', vlan_link: 'p', vlan_id: 7, mtu: 9000 },
      ],
      networks: [{ type: 'ipv4', link: 'v', ip_address: '192.0.2.5', netmask: '255.255.255.0' }],
    };
    const plan = planNetwork(parseNetworkData(doc), new Map([['eno1', MAC_A]]));
    expect(plan.steps.filter((s) => 'ip' in s && s.ip.includes('mtu'))).toEqual([
      { ip: ['link', 'set', 'dev', 'eno1', 'mtu', '9000'] },
      { ip: ['link', 'set', 'dev', 'eno1.7', 'mtu', '9000'] },
    ]);
    expect(plan.configured).toEqual(['eno1', 'eno1.7']);
  });

  it('refuses a malformed document with the place and the reason', () => {
    const bad = (patch: (d: typeof DOC) => unknown) => () => parseNetworkData(patch(structuredClone(DOC)));
    expect(bad(() => [])).toThrow('network_data.json: the document: must be an object');
    expect(bad((d) => ({ ...d, networks: [{ ...d.networks[0], netmask: '255.0.255.0' }] }))).toThrow(
      'network_data.json: networks[0]: netmask 255.0.255.0 is not contiguous',
    );
    expect(bad((d) => ({ ...d, networks: [{ ...d.networks[0], ip_address: '2001:db8::1' }] }))).toThrow(
      'networks[0]: ip_address 2001:db8::1 is not an IPv4 address',
    );
    expect(bad((d) => ({ ...d, networks: [{ ...d.networks[0], link: 'nowhere' }] }))).toThrow(
      'networks[0]: no link has the id nowhere',
    );
    expect(bad((d) => ({ ...d, links: [{ id: 'x', type: 'phy' }] }))).toThrow(
      'links[0]: a phy link needs ethernet_mac_address',
    );
    expect(
      bad((d) => ({ ...d, links: [...d.links, { id: 'v', type: 'vlan', vlan_link: 'port-a', vlan_id: 5000 }] })),
    ).toThrow('links[6]: a vlan needs vlan_id 1..4094');
    expect(bad((d) => ({ ...d, links: [d.links[0], d.links[0]] }))).toThrow('links: two links have the id port-a');
    expect(
      bad((d) => ({ ...d, networks: [{ ...d.networks[0], routes: [{ network: '0.0.0.0', netmask: '0.0.0.0' }] }] })),
    ).toThrow('networks[0]: a route needs a gateway address');
  });

  it('reads whole numbers (an MTU, a VLAN id, a prefix length) by the rules of agent/parse.ts', () => {
    const withLink = (patch: Record<string, unknown>) => () =>
      parseNetworkData({ ...DOC, links: [{ ...DOC.links[0], ...patch }, ...DOC.links.slice(1)] }).links[0]!.mtu;
    expect([1500, '1500', ' 1500 ', '+1500'].map((mtu) => withLink({ mtu })())).toEqual([1500, 1500, 1500, 1500]);
    for (const mtu of ['1500.0', '1e3', '0x5dc', -1, 1500.5, true, 'big'])
      expect(withLink({ mtu }), String(mtu)).toThrow('links[0]: mtu must be a whole number');
    const address = (ip_address: string) => () =>
      parseNetworkData({ ...DOC, networks: [{ ...DOC.networks[0], ip_address, netmask: undefined }] }).networks[0]!
        .prefix;
    expect(address('192.0.2.9/24')()).toBe(24);
    expect(address('192.0.2.9/0')()).toBe(0);
    for (const given of ['192.0.2.9/', '192.0.2.9/33', '192.0.2.9/24.0', '192.0.2.9/0x18', '192.0.2.9'])
      expect(address(given), given).toThrow(`networks[0]: ${given} needs a netmask or a prefix length`);
  });
});
