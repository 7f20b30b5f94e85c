// `memory` of the inventory. `total` is MemTotal (what psutil reports); `physical_mb` is the installed
// RAM, which IPA sums from lshw's DMI memory banks: here the SMBIOS type 17 (memory device) records the
// kernel exports under /sys/firmware/dmi/entries are summed directly. Without DMI, the online memory
// blocks the kernel manages stand in (a little below the installed size, never above it).
import type { HostRoot } from './host-root.ts';

export interface MemoryInfo {
  total: number | null;
  physical_mb: number | null;
}

/** Size of one SMBIOS type 17 record in MiB (0 for an empty slot, null when unknown). */
export function memoryDeviceMiB(raw: Buffer): number | null {
  if (raw.length < 0x0e || raw[0] !== 17) return null;
  const size = raw.readUInt16LE(0x0c);
  if (size === 0xffff) return null;
  if (size === 0x7fff) return raw.length >= 0x20 ? raw.readUInt32LE(0x1c) & 0x7fffffff : null;
  return size & 0x8000 ? (size & 0x7fff) / 1024 : size;
}

async function dmiMiB(root: HostRoot): Promise<number | null> {
  const dir = '/sys/firmware/dmi/entries';
  let sum = 0;
  let seen = 0;
  for (const entry of (await root.list(dir)).filter((e) => e.startsWith('17-'))) {
    const raw = await root.readBytes(`${dir}/${entry}/raw`);
    const mib = raw ? memoryDeviceMiB(raw) : null;
    if (mib === null) continue;
    sum += mib;
    seen++;
  }
  return seen > 0 ? Math.round(sum) : null;
}

async function memoryBlocksMiB(root: HostRoot): Promise<number | null> {
  const dir = '/sys/devices/system/memory';
  const blockBytes = parseInt((await root.read(`${dir}/block_size_bytes`)) ?? '', 16);
  if (!(blockBytes > 0)) return null;
  let online = 0;
  for (const entry of (await root.list(dir)).filter((e) => /^memory\d+$/.test(e))) {
    if ((await root.read(`${dir}/${entry}/online`)) === '1') online++;
  }
  return online > 0 ? Math.round((online * blockBytes) / 1048576) : null;
}

export function memTotalBytes(meminfo: string): number | null {
  const kb = /^MemTotal:\s+(\d+)\s*kB/m.exec(meminfo)?.[1];
  return kb ? Number(kb) * 1024 : null;
}

export async function readMemory(root: HostRoot): Promise<MemoryInfo> {
  return {
    total: memTotalBytes((await root.read('/proc/meminfo')) ?? ''),
    physical_mb: (await dmiMiB(root)) ?? (await memoryBlocksMiB(root)),
  };
}
