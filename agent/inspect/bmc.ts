// `bmc_address`, `bmc_v6address` and `bmc_mac`: asked of the BMC with ipmitool, only where the kernel
// exposes an IPMI device. No device → null addresses and no `bmc_mac` key, as IPA reports them.
import type { HostRoot } from './host-root.ts';

/** Runs `ipmitool <args>`; rejects with the tool's stderr in the message on failure. */
export type Ipmitool = (args: string[]) => Promise<string>;

export interface BmcInfo {
  bmc_address: string | null;
  bmc_v6address: string | null;
  bmc_mac?: string;
}

const CHANNELS = Array.from({ length: 11 }, (_, i) => i + 1);
const ZERO_MAC = '00:00:00:00:00:00';

export async function ipmiDeviceExists(root: HostRoot): Promise<boolean> {
  if ((await root.list('/dev')).some((n) => n.startsWith('ipmi'))) return true;
  return (await root.list('/dev/ipmi')).length > 0 || (await root.list('/dev/ipmidev')).length > 0;
}

function field(text: string, label: string): string | undefined {
  const re = new RegExp(`^${label}\\s*:\\s*(\\S+)`, 'm');
  return re.exec(text)?.[1];
}

interface Channel {
  ip?: string;
  mac?: string;
}

async function lanPrint(ipmitool: Ipmitool, ch: number): Promise<Channel | null> {
  try {
    const text = await ipmitool(['lan', 'print', String(ch)]);
    return { ip: field(text, 'IP Address'), mac: field(text, 'MAC Address')?.toLowerCase() };
  } catch (err) {
    if (/Invalid channel/i.test((err as Error).message)) return null;
    throw err;
  }
}

/** The addresses from `ipmitool lan6 print <ch>`: dynamic ones that are active, static ones that are enabled. */
async function lan6Address(ipmitool: Ipmitool, ch: number): Promise<string | undefined> {
  let enables: string;
  try {
    enables = await ipmitool(['lan6', 'print', String(ch), 'enables']);
  } catch {
    return undefined;
  }
  if (!/ipv6|both/i.test(enables)) return undefined;
  for (const kind of ['dynamic_addr', 'static_addr']) {
    let text: string;
    try {
      text = await ipmitool(['lan6', 'print', String(ch), kind]);
    } catch {
      continue;
    }
    for (const block of text.split(/\n(?=\s*(?:Dynamic|Static) Address)/)) {
      const addr = /Address:\s*([0-9a-f:]+)(?:\/\d+)?/i.exec(block)?.[1];
      const status = /Status:\s*(\w+)/i.exec(block)?.[1]?.toLowerCase();
      const good = kind === 'dynamic_addr' ? status === 'active' : /Enabled:\s*yes/i.test(block) || status === 'active';
      if (addr && addr !== '::' && good) return addr;
    }
  }
  return undefined;
}

export async function readBmc(root: HostRoot, ipmitool: Ipmitool): Promise<BmcInfo> {
  if (!(await ipmiDeviceExists(root))) return { bmc_address: null, bmc_v6address: null };
  const out: BmcInfo = { bmc_address: null, bmc_v6address: null };
  let anyChannel = false;
  let firstMac: string | undefined;
  try {
    for (const ch of CHANNELS) {
      const c = await lanPrint(ipmitool, ch);
      if (!c) continue;
      anyChannel = true;
      if (c.ip && c.ip !== '0.0.0.0') {
        out.bmc_address = c.ip;
        if (c.mac && c.mac !== ZERO_MAC) firstMac = c.mac;
        break;
      }
    }
    if (anyChannel && !out.bmc_address) out.bmc_address = '0.0.0.0';
    let v6: string | undefined;
    for (const ch of CHANNELS) {
      v6 = await lan6Address(ipmitool, ch);
      if (v6) break;
    }
    out.bmc_v6address = v6 ?? '::/0';
  } catch {
    // ipmitool missing or the BMC not answering: IPA reports what it has, nulls for the rest.
  }
  if (firstMac) out.bmc_mac = firstMac;
  return out;
}
