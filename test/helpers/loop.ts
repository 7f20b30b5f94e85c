// Loop devices for tests: sparse backing files attached with losetup, always detached afterwards
// (also when a test fails, and on process exit as a last resort).
import { execFileSync } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';

export interface LoopDevice {
  path: string;
  file: string;
  sizeBytes: number;
}

const attached = new Set<string>();
const dirs = new Set<string>();

// Last resort for a worker that exits mid-test; 'exit' handlers cannot await, hence the sync call.
process.once('exit', () => {
  for (const dev of attached) {
    try {
      execFileSync('losetup', ['-d', dev], { stdio: 'ignore' });
    } catch {
      // already detached
    }
  }
});

export async function attachLoop(sizeBytes: number, opts: { sectorSize?: number } = {}): Promise<LoopDevice> {
  const dir = await mkdtemp(join(tmpdir(), 'ina-loop-'));
  dirs.add(dir);
  const file = join(dir, 'disk.img');
  await execa('truncate', ['-s', String(sizeBytes), file]);
  const args = ['--find', '--show', '--partscan'];
  if (opts.sectorSize) args.push('--sector-size', String(opts.sectorSize));
  const { stdout } = await execa('losetup', [...args, file]);
  const path = stdout.trim();
  attached.add(path);
  return { path, file, sizeBytes };
}

export async function detachLoop(dev: LoopDevice): Promise<void> {
  const r = await execa('losetup', ['-d', dev.path], { reject: false });
  // A device left attached is a leak the run must show; the exit handler tries again.
  if (r.exitCode !== 0) throw new Error(`losetup -d ${dev.path} failed: ${r.stderr.trim()}`);
  attached.delete(dev.path);
  const dir = join(dev.file, '..');
  await rm(dir, { recursive: true, force: true });
  dirs.delete(dir);
}

/** Detaches every device even when one fails to be; throws the first failure after. */
async function detachAll(devs: LoopDevice[]): Promise<void> {
  const failures = (await Promise.allSettled(devs.map((d) => detachLoop(d)))).filter((r) => r.status === 'rejected');
  if (failures.length > 0) throw failures[0]!.reason;
}

/** Attaches devices for a test body and detaches them whatever happens. */
export async function withLoops<T>(
  sizes: number[],
  body: (devs: LoopDevice[]) => Promise<T>,
  opts: { sectorSize?: number } = {},
): Promise<T> {
  const devs: LoopDevice[] = [];
  let result: T;
  try {
    for (const size of sizes) devs.push(await attachLoop(size, opts));
    result = await body(devs);
  } catch (err) {
    // The test's own failure is the one to report; a device that would not detach is retried at exit.
    await detachAll(devs).catch(() => undefined);
    throw err;
  }
  await detachAll(devs);
  return result;
}

export const MiB = 1024 * 1024;
export const GiB = 1024 * MiB;
