// A network_data.json as Ironic injects it for a node with a bond of two NICs, a VLAN on it, and a third NIC
// left to DHCP; shared by the netconf tests.
export const MAC_A = '52:54:00:aa:00:01';
export const MAC_B = '52:54:00:aa:00:02';
export const MAC_C = '52:54:00:aa:00:03';

export const DOC = {
  links: [
    { id: 'port-a', type: 'phy', ethernet_mac_address: MAC_A.toUpperCase(), mtu: 9000 },
    { id: 'port-b', type: 'phy', ethernet_mac_address: MAC_B },
    {
      id: 'bond0',
      type: 'bond',
      bond_links: ['port-a', 'port-b'],
      bond_mode: '802.3ad',
      bond_miimon: 100,
      ethernet_mac_address: MAC_A,
    },
    { id: 'vlan-101', type: 'vlan', vlan_link: 'bond0', vlan_id: 101, vlan_mac_address: MAC_A },
    { id: 'port-c', type: 'ethernet', ethernet_mac_address: MAC_C },
    { id: 'port-gone', type: 'phy', ethernet_mac_address: '52:54:00:aa:00:09' },
  ],
  networks: [
    {
      id: 'net0',
      type: 'ipv4',
      link: 'bond0',
      ip_address: '192.0.2.10',
      netmask: '255.255.255.0',
      routes: [{ network: '0.0.0.0', netmask: '0.0.0.0', gateway: '192.0.2.1' }],
      dns_nameservers: ['192.0.2.53'],
    },
    {
      id: 'net1',
      type: 'ipv6',
      link: 'vlan-101',
      ip_address: '2001:db8::10/64',
      routes: [{ network: '2001:db8:1::', netmask: 'ffff:ffff:ffff:ffff::', gateway: '2001:db8::1' }],
    },
    { id: 'net2', type: 'ipv4_dhcp', link: 'port-c' },
  ],
  services: [{ type: 'dns', address: '198.51.100.53' }],
};
