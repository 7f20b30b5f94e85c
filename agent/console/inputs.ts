// What the console shows, read fresh on each refresh: the agent's status file, the tail of its log,
// the NICs (from the kernel, not the agent, so they show even when the agent is down) and the disks.
import { open, readFile, readdir, type FileHandle } from 'node:fs/promises';
import { networkInterfaces } from 'node:os';
import { run } from '../exec.ts';
import type { StatusFile } from '../status-file.ts';
import type { Disk, Nic } from './screen.ts';

export async function readStatus(path: string): Promise<StatusFile | null> {
  try {
    const doc = JSON.parse(await readFile(path, 'utf8')) as Partial<StatusFile>;
    if (typeof doc !== 'object' || doc === null || typeof doc.status !== 'object' || !Array.isArray(doc.commands))
      return null;
    return doc as StatusFile;
  } catch {
    return null;
  }
}

/** The last `maxLines` lines of a log file, reading at most the last `maxBytes` of it. */
export async function tailLines(path: string, maxLines: number, maxBytes = 1 << 20): Promise<string[]> {
  let fh: FileHandle;
  try {
    fh = await open(path, 'r');
  } catch {
    return [];
  }
  try {
    const { size } = await fh.stat();
    const len = Math.min(size, maxBytes);
    const buf = Buffer.alloc(len);
    await fh.read(buf, 0, len, size - len);
    const lines = buf.toString('utf8').split('\n');
    if (len < size) lines.shift();
    return lines.filter((l) => l !== '').slice(-maxLines);
  } finally {
    await fh.close();
  }
}

export async function countLines(path: string): Promise<number> {
  try {
    return (await readFile(path, 'utf8')).split('\n').filter(Boolean).length;
  } catch {
    return 0;
  }
}

/** NICs from /sys/class/net (every NIC, addressed or not), with addresses from the OS. */
export async function readNics(sysNet = '/sys/class/net'): Promise<Nic[]> {
  const addrs = networkInterfaces();
  let names: string[];
  try {
    names = (await readdir(sysNet)).filter((n) => n !== 'lo').sort();
  } catch {
    names = Object.keys(addrs)
      .filter((n) => n !== 'lo')
      .sort();
  }
  return Promise.all(
    names.map(async (name) => ({
      name,
      mac:
        (await readFile(`${sysNet}/${name}/address`, 'utf8').catch(() => '')).trim() || (addrs[name]?.[0]?.mac ?? '?'),
      addresses: (addrs[name] ?? []).map((a) => a.cidr ?? a.address),
    })),
  );
}

interface LsblkJson {
  blockdevices?: { name: string; size: number | string; type: string; model?: string | null }[];
}

/** Whole disks from lsblk, or the reason they could not be listed. */
export async function readDisks(): Promise<Disk[] | string> {
  try {
    const r = await run('lsblk', ['--json', '--bytes', '--nodeps', '--output', 'NAME,SIZE,TYPE,MODEL'], {
      query: true,
      timeoutMs: 5000,
    });
    const doc = JSON.parse(r.stdout) as LsblkJson;
    return (doc.blockdevices ?? [])
      .filter((d) => d.type === 'disk' && Number(d.size) > 0)
      .map((d) => ({ name: d.name, bytes: Number(d.size), type: d.type, model: d.model?.trim() || undefined }));
  } catch (err) {
    return `lsblk failed: ${err instanceof Error ? err.message : String(err)}`;
  }
}
