// Mounts the agent makes for its own brief use (a partition it wrote, a chroot's system folders): each one is
// undone however the work ends, innermost first, so no filesystem of a deployed disk stays mounted in the
// ramdisk (the device guard would then refuse that disk, and a later write could race the kernel's cache).
import { mkdtemp, rmdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CommandExecutionError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';

export class MountStack {
  private readonly targets: string[] = [];
  private readonly madeDirs: string[] = [];

  constructor(private readonly log?: Logger) {}

  /**
   * `mount <args…> <target>`, remembered for release (`args` ends with the source: a device, or `proc`). `slave`:
   * the mount (a bind) then receives what is mounted below its source but sends nothing back, so whatever a
   * chroot's programs mount below it does not appear in the ramdisk.
   */
  async mount(args: readonly string[], target: string, o: { slave?: boolean } = {}): Promise<void> {
    await run('mount', [...args, target], { log: this.log });
    this.targets.push(target);
    if (o.slave) await run('mount', ['--make-rslave', target], { log: this.log });
  }

  /** Mounts `source` on a new private folder under the temporary folder, which release removes. */
  async mountAtNewDir(args: readonly string[], prefix: string): Promise<string> {
    const dir = await mkdtemp(join(tmpdir(), prefix));
    this.madeDirs.push(dir);
    await this.mount(args, dir);
    return dir;
  }

  /**
   * Unmounts everything, innermost first. One that will not unmount (still busy) is detached lazily, so nothing
   * is left in the mount table; the returned list names those, and the caller says so (IPA fails the command).
   */
  async release(): Promise<string[]> {
    const stuck: string[] = [];
    while (this.targets.length > 0) {
      const target = this.targets.pop()!;
      try {
        await run('umount', [target], { log: this.log });
      } catch (err) {
        stuck.push(`${target} (${errorText(err)})`);
        await run('umount', ['-l', target], { log: this.log }).catch((e: unknown) =>
          this.log?.error({ target, err: errorText(e) }, 'could not detach a mount'),
        );
      }
    }
    for (const dir of this.madeDirs.splice(0).reverse()) {
      await rmdir(dir).catch((e: unknown) => this.log?.warn({ dir, err: errorText(e) }, 'mount point not removed'));
    }
    return stuck;
  }
}

/**
 * Runs `fn` with `device` mounted (with `options`, e.g. `ro`) on a private folder, unmounted however it ends. A
 * mount that stays busy after `fn` succeeded fails the work (CommandExecutionError): what was written may not be
 * on the disk yet.
 */
export async function withMounted<T>(
  device: string,
  fn: (dir: string) => Promise<T>,
  o: { log?: Logger; options?: string; prefix?: string } = {},
): Promise<T> {
  const mounts = new MountStack(o.log);
  let result: T;
  try {
    const dir = await mounts.mountAtNewDir([...(o.options ? ['-o', o.options] : []), device], o.prefix ?? 'ina-mount-');
    result = await fn(dir);
  } catch (err) {
    // the work's own failure is the one to report
    const stuck = await mounts.release();
    if (stuck.length > 0) o.log?.error({ stuck }, 'unmounted lazily');
    throw err;
  }
  const stuck = await mounts.release();
  if (stuck.length > 0) throw new CommandExecutionError(`Unmounting ${device} failed: ${stuck.join('; ')}`);
  return result;
}
