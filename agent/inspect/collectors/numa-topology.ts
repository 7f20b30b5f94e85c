// `numa_topology`: RAM per node, physical cores per node with their thread siblings, and each NIC's node,
// from /sys/devices/system/node and /sys/class/net/*/device/numa_node.
import type { HostRoot } from '../host-root.ts';

export interface NumaTopology {
  ram: { numa_node: number; size_kb: number }[];
  cpus: { cpu: number; numa_node: number; thread_siblings: number[] }[];
  nics: { name: string; numa_node: number }[];
}

export class NumaFormatError extends Error {}

/** `0-3,8,10-11` → [0,1,2,3,8,10,11]. */
export function parseCpuList(text: string): number[] {
  const out: number[] = [];
  for (const part of text
    .split(',')
    .map((p) => p.trim())
    .filter(Boolean)) {
    const m = /^(\d+)(?:-(\d+))?$/.exec(part);
    if (!m) throw new NumaFormatError(`bad CPU list "${text}"`);
    for (let i = Number(m[1]); i <= Number(m[2] ?? m[1]); i++) out.push(i);
  }
  return out;
}

export async function readNumaTopology(root: HostRoot): Promise<NumaTopology> {
  const base = '/sys/devices/system/node';
  const nodes = (await root.list(base)).filter((n) => /^node\d+$/.test(n));
  if (nodes.length === 0) throw new NumaFormatError(`no NUMA nodes under ${base}`);
  const topo: NumaTopology = { ram: [], cpus: [], nics: [] };
  for (const node of nodes) {
    const id = Number(node.slice(4));
    const meminfo = (await root.read(`${base}/${node}/meminfo`)) ?? '';
    const kb = /MemTotal:\s+(\d+)\s*kB/.exec(meminfo)?.[1];
    if (!kb) throw new NumaFormatError(`no MemTotal in ${base}/${node}/meminfo`);
    topo.ram.push({ numa_node: id, size_kb: Number(kb) });
    const seen = new Set<number>();
    for (const cpu of (await root.list(`${base}/${node}`)).filter((c) => /^cpu\d+$/.test(c))) {
      const topoDir = `/sys/devices/system/cpu/${cpu}/topology`;
      const core = Number(await root.read(`${topoDir}/core_id`));
      const siblings = await root.read(`${topoDir}/thread_siblings_list`);
      if (!Number.isInteger(core) || siblings === null) throw new NumaFormatError(`no topology for ${cpu}`);
      if (seen.has(core)) continue;
      seen.add(core);
      topo.cpus.push({ cpu: core, numa_node: id, thread_siblings: parseCpuList(siblings) });
    }
  }
  for (const name of await root.list('/sys/class/net')) {
    const n = await root.read(`/sys/class/net/${name}/device/numa_node`);
    if (n !== null) topo.nics.push({ name, numa_node: Number(n) });
  }
  return topo;
}
