// How much memory the agent may still fill: the host's MemAvailable, and, under a memory cgroup (a
// container, a Metal3-style pod), the room left below the cgroup's limit and each ancestor's. Without the
// second, a tmpfs buffer sized from MemAvailable gets the agent OOM-killed mid-download. Page cache the
// kernel can drop (inactive file pages) does not count as used, as the kernel reclaims it before killing.
import { readFile, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';

export interface MemoryPaths {
  meminfo: string;
  /** /proc/self/cgroup */
  selfCgroup: string;
  /** Where cgroups are mounted: the v2 hierarchy itself, or the folder holding v1's `memory`. */
  cgroupRoot: string;
}

export const SYSTEM_MEMORY_PATHS: MemoryPaths = {
  meminfo: '/proc/meminfo',
  selfCgroup: '/proc/self/cgroup',
  cgroupRoot: '/sys/fs/cgroup',
};

async function text(path: string): Promise<string | null> {
  return readFile(path, 'utf8').catch(() => null);
}

async function exists(path: string): Promise<boolean> {
  return stat(path).then(
    () => true,
    () => false,
  );
}

export async function memAvailable(paths: MemoryPaths = SYSTEM_MEMORY_PATHS): Promise<number | null> {
  const m = /^MemAvailable:\s+(\d+) kB/m.exec((await text(paths.meminfo)) ?? '');
  return m ? Number(m[1]) * 1024 : null;
}

interface Flavour {
  /** The agent's cgroup folder. */
  leaf: string;
  /** Where the walk up the ancestors stops (the mounted hierarchy's root). */
  top: string;
  limit: string;
  usage: string;
  inactiveFile: RegExp;
}

async function flavour(paths: MemoryPaths): Promise<Flavour | null> {
  const lines = ((await text(paths.selfCgroup)) ?? '').split('\n');
  const v2 = lines.find((l) => l.startsWith('0::'));
  if (v2 !== undefined && (await exists(join(paths.cgroupRoot, 'cgroup.controllers')))) {
    const top = paths.cgroupRoot;
    return {
      leaf: await within(top, v2.slice(3)),
      top,
      limit: 'memory.max',
      usage: 'memory.current',
      inactiveFile: /^inactive_file (\d+)$/m,
    };
  }
  const v1 = lines.map((l) => l.split(':')).find((f) => f.length >= 3 && f[1]!.split(',').includes('memory'));
  if (v1) {
    const top = join(paths.cgroupRoot, 'memory');
    return {
      leaf: await within(top, v1.slice(2).join(':')),
      top,
      limit: 'memory.limit_in_bytes',
      usage: 'memory.usage_in_bytes',
      inactiveFile: /^total_inactive_file (\d+)$/m,
    };
  }
  return null;
}

/** The cgroup's folder; inside a cgroup namespace (or a container's own mount) the path may not exist from here. */
async function within(top: string, path: string): Promise<string> {
  const full = join(top, path);
  return (await exists(full)) ? full : top;
}

/** Bytes left below the tightest memory limit of the agent's cgroup and its ancestors; null when unlimited. */
export async function cgroupRoom(paths: MemoryPaths = SYSTEM_MEMORY_PATHS): Promise<number | null> {
  const f = await flavour(paths);
  if (!f) return null;
  let room: number | null = null;
  for (let dir = f.leaf; ; dir = dirname(dir)) {
    const limitText = (await text(join(dir, f.limit)))?.trim();
    const usageText = (await text(join(dir, f.usage)))?.trim();
    const limit = limitText && /^\d+$/.test(limitText) ? Number(limitText) : null;
    // v1 says "no limit" with a huge number (PAGE_COUNTER_MAX pages), v2 with "max".
    if (limit !== null && limit < 2 ** 60 && usageText && /^\d+$/.test(usageText)) {
      const inactive = f.inactiveFile.exec((await text(join(dir, 'memory.stat'))) ?? '');
      const used = Math.max(0, Number(usageText) - (inactive ? Number(inactive[1]) : 0));
      const left = Math.max(0, limit - used);
      room = room === null ? left : Math.min(room, left);
    }
    if (dir === f.top || dirname(dir) === dir || !dir.startsWith(f.top)) break;
  }
  return room;
}

/** What the agent may still fill: the lesser of MemAvailable and its cgroups' room; null when neither is known. */
export async function availableMemory(
  paths: MemoryPaths = SYSTEM_MEMORY_PATHS,
): Promise<{ bytes: number; limitedBy: 'host' | 'cgroup' } | null> {
  const [host, cgroup] = await Promise.all([memAvailable(paths), cgroupRoom(paths)]);
  if (cgroup !== null && (host === null || cgroup < host)) return { bytes: cgroup, limitedBy: 'cgroup' };
  return host === null ? null : { bytes: host, limitedBy: 'host' };
}
