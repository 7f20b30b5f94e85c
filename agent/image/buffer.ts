// The buffer for images that cannot be streamed: a file in `ipa-image-buffer-dir` (RAM-backed tmpfs in the
// ramdisk). Before downloading, check that the image fits in the directory and, on tmpfs, in memory; delete
// what a deploy that did not finish left there (it would count against this one, and on tmpfs it is RAM).
import { randomBytes } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { readdir, rm, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { ImageDownloadOutofSpaceError, errorText } from '../errors.ts';
import { availableMemory, SYSTEM_MEMORY_PATHS, type MemoryPaths } from '../host/memory.ts';
import type { Logger } from '../log.ts';

const TMPFS_MAGIC = 0x01021994;
const MiB = 1024 * 1024;
/** Memory left for the agent, qemu-img and the kernel after a tmpfs buffer is filled. */
export const MEMORY_RESERVE = 256 * MiB;

export interface BufferBudget {
  /** Bytes the buffer file may grow to. */
  limit: number;
  tmpfs: boolean;
}

/** How big the buffer may grow; refuses at once when `expectedBytes` (if known) cannot fit. */
export async function bufferBudget(
  dir: string,
  expectedBytes: number | undefined,
  memory: MemoryPaths = SYSTEM_MEMORY_PATHS,
): Promise<BufferBudget> {
  let st: Awaited<ReturnType<typeof statfs>>;
  try {
    st = await statfs(dir);
  } catch (err) {
    throw new ImageDownloadOutofSpaceError(`image buffer directory ${dir} is not usable: ${(err as Error).message}`);
  }
  const free = st.bavail * st.bsize;
  const tmpfs = st.type === TMPFS_MAGIC;
  let limit = free;
  let byCgroup = false;
  if (tmpfs) {
    const mem = await availableMemory(memory);
    if (mem !== null && mem.bytes - MEMORY_RESERVE < limit) {
      limit = Math.max(0, mem.bytes - MEMORY_RESERVE);
      byCgroup = mem.limitedBy === 'cgroup';
    }
  }
  if (expectedBytes !== undefined && expectedBytes > limit) {
    const why = !tmpfs
      ? 'its free space'
      : byCgroup
        ? "RAM-backed: the room below the agent's memory cgroup limit"
        : 'RAM-backed: the lesser of its free space and free memory';
    throw new ImageDownloadOutofSpaceError(
      `the image (${expectedBytes} bytes) does not fit in the buffer: ${dir} can take ${limit} bytes (${why})`,
    );
  }
  return { limit, tmpfs };
}

/** A process's start time (clock ticks after boot): with the pid, it names one process, even after pid reuse. */
function startTime(pid: number | 'self'): string | null {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19] ?? null;
  } catch {
    return null;
  }
}

const OWNER = `${process.pid}.${startTime('self') ?? 0}`;
const STAMPED = /^ina-image-(\d+)\.(\d+)-/;
/** Buffer files this process is using right now (several in-process agents may share a directory). */
const inUse = new Set<string>();

/**
 * A fresh file name in the buffer directory, stamped with this process (pid and start time), so that one
 * left by a process that died (SIGKILL, the OOM killer) can be told from one in use; the image id only
 * contributes harmless characters. `discardBuffer` deletes it.
 */
export function bufferPath(dir: string, imageId: string): string {
  const safe = imageId
    .replace(/[^A-Za-z0-9._-]/g, '_')
    .replace(/^\.+/, '')
    .slice(0, 64);
  const path = join(dir, `ina-image-${OWNER}-${safe}-${randomBytes(4).toString('hex')}`);
  inUse.add(path);
  return path;
}

export async function discardBuffer(path: string): Promise<void> {
  await rm(path, { force: true });
  inUse.delete(path);
}

/**
 * Deletes buffer files no live deploy owns: those of a process that no longer runs (or whose pid now names
 * another process), and this process's own that no deploy uses. Other live agents' files and anything else
 * in the directory stay.
 */
export async function cleanStaleBuffers(dir: string, log: Logger): Promise<string[]> {
  const removed: string[] = [];
  for (const name of await readdir(dir).catch(() => [] as string[])) {
    const m = STAMPED.exec(name);
    if (!m) continue;
    const path = join(dir, name);
    const owner = `${m[1]}.${m[2]}`;
    const stale = owner === OWNER ? !inUse.has(path) : startTime(Number(m[1])) !== m[2];
    if (!stale) continue;
    try {
      await rm(path, { force: true });
      removed.push(path);
    } catch (err) {
      log.warn({ path, err: errorText(err) }, 'could not delete a stale image buffer');
    }
  }
  if (removed.length > 0) log.warn({ removed }, 'deleted image buffers left by a deploy that did not finish');
  return removed;
}
