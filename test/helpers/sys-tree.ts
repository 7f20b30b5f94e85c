// Builds a /sys + /proc tree in the kernel's layout for inventory readers, for the layouts this host's
// kernel cannot show (it has no bonding, 8021q, DMI or NVMe): files by path, symlinks like sysfs's.
import { mkdir, mkdtemp, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';

export type TreeSpec = Record<string, string | Buffer | { link: string }>;

export async function buildTree(spec: TreeSpec): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'ina-systree-'));
  for (const [path, content] of Object.entries(spec)) {
    const full = join(root, path);
    await mkdir(dirname(full), { recursive: true });
    if (typeof content === 'object' && !Buffer.isBuffer(content)) await symlink(content.link, full);
    else await writeFile(full, content);
  }
  return root;
}

/** An SMBIOS type 17 record (memory device) of `mib` MiB, as /sys/firmware/dmi/entries/17-N/raw holds it. */
export function smbiosMemoryDevice(mib: number): Buffer {
  const b = Buffer.alloc(0x28);
  b[0] = 17;
  b[1] = 0x28;
  if (mib >= 0x7fff) {
    b.writeUInt16LE(0x7fff, 0x0c);
    b.writeUInt32LE(mib, 0x1c);
  } else b.writeUInt16LE(mib, 0x0c);
  return b;
}
