// LLDP frames as switches send them, for the capture test: an Ethernet header to the nearest-bridge
// group address, then TLVs (7-bit type, 9-bit length).
const tlv = (type: number, value: Buffer): Buffer => {
  const h = Buffer.alloc(2);
  h.writeUInt16BE((type << 9) | value.length);
  return Buffer.concat([h, value]);
};
const mac = (s: string) => Buffer.from(s.replaceAll(':', ''), 'hex');
const u16 = (n: number) => {
  const b = Buffer.alloc(2);
  b.writeUInt16BE(n);
  return b;
};

/** A TLV as the inventory reports it (IPA's form): its type and its value in hex. */
export type BuiltTlv = [type: number, hex: string];

/**
 * A leaf switch port: chassis MAC, port name, TTL, description, system name/description, capabilities,
 * management IPv4, 802.1 PVID and VLAN name, 802.3 MAC/PHY, End. `tlvs` are the TLVs as built, for checks
 * that must not lean on the agent's own parser.
 */
export function switchFrame(opts: { src: string; port: string; system: string; vlan: number }): {
  frame: Buffer;
  tlvs: BuiltTlv[];
} {
  const header = Buffer.concat([mac('01:80:c2:00:00:0e'), mac(opts.src), u16(0x88cc)]);
  const vlanName = Buffer.from(`vlan${opts.vlan}`);
  const built: [number, Buffer][] = [
    [1, Buffer.concat([Buffer.from([4]), mac(opts.src)])],
    [2, Buffer.concat([Buffer.from([5]), Buffer.from(opts.port)])],
    [3, u16(120)],
    [4, Buffer.from(`to server-17 ${opts.port}`)],
    [5, Buffer.from(opts.system)],
    [6, Buffer.from('Arista Networks EOS version 4.30.1F')],
    [7, Buffer.from([0x00, 0x14, 0x00, 0x14])],
    [8, Buffer.from([5, 1, 10, 0, 0, 2, 2, 0, 0, 0, 0, 0])],
    [127, Buffer.concat([Buffer.from([0x00, 0x80, 0xc2, 1]), u16(opts.vlan)])],
    [
      127,
      Buffer.concat([Buffer.from([0x00, 0x80, 0xc2, 3]), u16(opts.vlan), Buffer.from([vlanName.length]), vlanName]),
    ],
    [127, Buffer.from([0x00, 0x12, 0x0f, 1, 0x03, 0x6c, 0x00, 0x00, 0x1e])],
    [0, Buffer.alloc(0)],
  ];
  return {
    frame: Buffer.concat([header, ...built.map(([type, value]) => tlv(type, value))]),
    tlvs: built.map(([type, value]) => [type, value.toString('hex')]),
  };
}
