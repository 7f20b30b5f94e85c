// How the ramdisk starts the agent (image-build's run-agent: node flags and environment), so that the benchmark
// and the soak measure the memory of what ships, not of Node's defaults.
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface Launch {
  flags: string[];
  env: Record<string, string>;
}

export async function shippedLaunch(tree: string): Promise<Launch> {
  const script = await readFile(join(tree, 'image-build/rootfs/usr/lib/ina/run-agent'), 'utf8');
  const flags = /^NODE_FLAGS='([^']*)'/m.exec(script);
  if (!flags) throw new Error('image-build/rootfs/usr/lib/ina/run-agent no longer sets NODE_FLAGS');
  const env = Object.fromEntries([...script.matchAll(/^export (\w+)=(\S+)$/gm)].map((m) => [m[1]!, m[2]!]));
  return { flags: flags[1]!.split(' ').filter(Boolean), env };
}
