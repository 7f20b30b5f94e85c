// `cpu` of the inventory, from /proc/cpuinfo and /sys/devices/system/cpu: the values IPA takes from lscpu,
// which reads the same files (the ramdisk then needs no lscpu run per inspection).
import { machine } from 'node:os';
import type { HostRoot } from './host-root.ts';

export interface CpuInfo {
  model_name: string;
  frequency: string;
  count: number;
  architecture: string;
  flags: string[];
  socket_count: number;
}

/** /proc/cpuinfo as one map of `key: value` per processor block. */
export function parseCpuinfo(text: string): Map<string, string>[] {
  const blocks: Map<string, string>[] = [];
  let current = new Map<string, string>();
  for (const line of text.split('\n')) {
    if (line.trim() === '') {
      if (current.size > 0) blocks.push(current);
      current = new Map();
      continue;
    }
    const colon = line.indexOf(':');
    if (colon < 0) continue;
    current.set(line.slice(0, colon).trim().toLowerCase(), line.slice(colon + 1).trim());
  }
  if (current.size > 0) blocks.push(current);
  return blocks;
}

/** lscpu prints MHz with four decimals; IPA passes that string on. */
const mhz = (n: number): string => n.toFixed(4);

export async function readCpu(root: HostRoot): Promise<CpuInfo> {
  const blocks = parseCpuinfo((await root.read('/proc/cpuinfo')) ?? '');
  const processors = blocks.filter((b) => b.has('processor'));
  const first = processors[0] ?? blocks[0] ?? new Map<string, string>();
  const maxKhz = Number(await root.read('/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq'));
  const curMhz = Number(first.get('cpu mhz'));
  const frequency = maxKhz > 0 ? mhz(maxKhz / 1000) : curMhz > 0 ? mhz(curMhz) : '';
  return {
    model_name: first.get('model name') ?? '',
    frequency,
    count: (await presentCount(root)) ?? processors.length,
    architecture: (await root.read('/proc/sys/kernel/arch')) ?? (root.dir === '/' ? machine() : ''),
    flags: (first.get('flags') ?? first.get('features') ?? '').split(/\s+/).filter(Boolean),
    socket_count: await socketCount(root, processors),
  };
}

/**
 * lscpu's "CPU(s)", which IPA reports: the CPUs present, online or not (with `nosmt` or CPUs taken offline,
 * /proc/cpuinfo lists only the online ones). Null when the kernel does not say.
 */
async function presentCount(root: HostRoot): Promise<number | null> {
  const list = await root.read('/sys/devices/system/cpu/present');
  if (!list || !/^\d+(-\d+)?(,\d+(-\d+)?)*$/.test(list)) return null;
  let n = 0;
  for (const range of list.split(',')) {
    const [a, b = a] = range.split('-').map(Number);
    n += b! - a! + 1;
  }
  return n;
}

async function socketCount(root: HostRoot, processors: Map<string, string>[]): Promise<number> {
  const packages = new Set<string>();
  for (const cpu of (await root.list('/sys/devices/system/cpu')).filter((n) => /^cpu\d+$/.test(n))) {
    const id = await root.read(`/sys/devices/system/cpu/${cpu}/topology/physical_package_id`);
    if (id !== null) packages.add(id);
  }
  if (packages.size > 0) return packages.size;
  const ids = new Set(processors.map((p) => p.get('physical id')).filter((v) => v !== undefined));
  return ids.size > 0 ? ids.size : processors.length > 0 ? 1 : 0;
}
