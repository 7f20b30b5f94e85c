// LLDP frames as IPA reports them: the TLVs after the 14-byte Ethernet header, each as
// `[type, "<hex of the value>"]` (7-bit type, 9-bit length), up to and including the End TLV.
// Frames arrive from our capture helper (lldp-capture.ts); recorded captures come as pcap.

export type LldpTlv = [number, string];

export const LLDP_ETHERTYPE = 0x88cc;

export function parseLldpFrame(frame: Buffer): LldpTlv[] {
  if (frame.length < 14) return [];
  const tlvs: LldpTlv[] = [];
  let at = 14;
  while (at + 2 <= frame.length) {
    const header = frame.readUInt16BE(at);
    const type = header >> 9;
    const length = header & 0x1ff;
    const value = frame.subarray(at + 2, at + 2 + length);
    if (value.length < length) break;
    tlvs.push([type, value.toString('hex')]);
    if (type === 0) break;
    at += 2 + length;
  }
  return tlvs;
}

/**
 * The packets of a classic pcap stream (either byte order, micro- or nanosecond stamps); a truncated tail is ignored.
 */
export function pcapPackets(data: Buffer): Buffer[] {
  if (data.length < 24) return [];
  const magic = data.readUInt32LE(0);
  let le: boolean;
  if (magic === 0xa1b2c3d4 || magic === 0xa1b23c4d) le = true;
  else if (magic === 0xd4c3b2a1 || magic === 0x4d3cb2a1) le = false;
  else throw new Error('not a pcap stream (bad magic)');
  const u32 = (at: number) => (le ? data.readUInt32LE(at) : data.readUInt32BE(at));
  const packets: Buffer[] = [];
  let at = 24;
  while (at + 16 <= data.length) {
    const len = u32(at + 8);
    if (at + 16 + len > data.length) break;
    packets.push(data.subarray(at + 16, at + 16 + len));
    at += 16 + len;
  }
  return packets;
}

/** Decoded TLVs of interest, for the console and logs (Ironic parses the raw form itself). */
export function describeLldp(tlvs: readonly LldpTlv[]): { chassisId?: string; portId?: string; systemName?: string } {
  const out: { chassisId?: string; portId?: string; systemName?: string } = {};
  for (const [type, hex] of tlvs) {
    const v = Buffer.from(hex, 'hex');
    const id = () =>
      v[0] === 4 && v.length === 7
        ? [...v.subarray(1)].map((b) => b.toString(16).padStart(2, '0')).join(':')
        : v.subarray(1).toString('utf8');
    if (type === 1) out.chassisId = id();
    else if (type === 2) out.portId = id();
    else if (type === 5) out.systemName = v.toString('utf8');
  }
  return out;
}
