// The buffer for images that cannot be streamed: a file in `ipa-image-buffer-dir` (RAM-backed tmpfs in the
// ramdisk). Before downloading, check that the image fits in the directory and, on tmpfs, in memory.
import { randomBytes } from 'node:crypto';
import { readFile, statfs } from 'node:fs/promises';
import { join } from 'node:path';
import { ImageDownloadOutofSpaceError } from '../errors.ts';

const TMPFS_MAGIC = 0x01021994;
const MiB = 1024 * 1024;
/** Memory left for the agent, qemu-img and the kernel after a tmpfs buffer is filled. */
export const MEMORY_RESERVE = 256 * MiB;

export async function memAvailable(): Promise<number | null> {
  const text = await readFile('/proc/meminfo', 'utf8').catch(() => '');
  const m = /^MemAvailable:\s+(\d+) kB/m.exec(text);
  return m ? Number(m[1]) * 1024 : null;
}

export interface BufferBudget {
  /** Bytes the buffer file may grow to. */
  limit: number;
  tmpfs: boolean;
}

/** How big the buffer may grow; refuses at once when `expectedBytes` (if known) cannot fit. */
export async function bufferBudget(dir: string, expectedBytes: number | undefined): Promise<BufferBudget> {
  let st: Awaited<ReturnType<typeof statfs>>;
  try {
    st = await statfs(dir);
  } catch (err) {
    throw new ImageDownloadOutofSpaceError(`image buffer directory ${dir} is not usable: ${(err as Error).message}`);
  }
  const free = st.bavail * st.bsize;
  const tmpfs = st.type === TMPFS_MAGIC;
  let limit = free;
  if (tmpfs) {
    const mem = await memAvailable();
    if (mem !== null) limit = Math.min(limit, Math.max(0, mem - MEMORY_RESERVE));
  }
  if (expectedBytes !== undefined && expectedBytes > limit) {
    const why = tmpfs ? 'RAM-backed: the lesser of its free space and free memory' : 'its free space';
    throw new ImageDownloadOutofSpaceError(
      `the image (${expectedBytes} bytes) does not fit in the buffer: ${dir} can take ${limit} bytes (${why})`,
    );
  }
  return { limit, tmpfs };
}

/** A fresh file name in the buffer directory; the image id only contributes harmless characters. */
export function bufferPath(dir: string, imageId: string): string {
  const safe = imageId.replace(/[^A-Za-z0-9._-]/g, '_').replace(/^\.+/, '').slice(0, 64);
  return join(dir, `ina-image-${safe}-${randomBytes(4).toString('hex')}`);
}
