// The one place that decides whether a block device may be chosen or written. Every write path asks
// `assertWritable` first. A device is protected when it, a partition of it, or anything stacked on it
// (dm, md, loop devices) is mounted or used as swap — which covers the root filesystem — or when an
// allow-list is configured and neither it nor its parent disk is on it. The kernel lists dm and md in
// `slaves`, but not loops: a loop's backing file is read from sysfs, and both directions are refused —
// the device holding a used loop's backing file, and a loop whose backing file is a protected device.
// With an allow-list, a loop onto a block device is allowed only if that device is allowed too.
// Last, the kernel is asked: an exclusive open fails with EBUSY while anything claims the device (a
// filesystem, also one spanning several devices or unmounted lazily but still busy, RAID, LVM, swap). What
// cannot be read (the mount table, the device) refuses rather than allows.
import { constants } from 'node:fs';
import { open, readlink, realpath, stat } from 'node:fs/promises';
import { basename } from 'node:path';
import { ProtectedDeviceError } from '../errors.ts';
import { run } from '../exec.ts';
import { listSys, readSys } from '../host/sysfs.ts';
import { pathOfMapReason } from '../host/multipath.ts';

export interface GuardVerdict {
  ok: boolean;
  reason?: string;
}

export interface GuardPaths {
  mountinfo: string;
  swaps: string;
  sysClassBlock: string;
  sysDevBlock: string;
}

const SYSTEM_PATHS: GuardPaths = {
  mountinfo: '/proc/self/mountinfo',
  swaps: '/proc/swaps',
  sysClassBlock: '/sys/class/block',
  sysDevBlock: '/sys/dev/block',
};

function majorMinor(dev: number): string {
  return `${Math.floor(dev / 256) & 0xfff}:${(dev & 0xff) | ((dev >> 12) & 0xfff00)}`;
}

export class DeviceGuard {
  private readonly allowlist: string[] | null;

  constructor(
    allowlist: readonly string[] | null,
    private readonly paths: GuardPaths = SYSTEM_PATHS,
  ) {
    this.allowlist = allowlist ? [...allowlist] : null;
  }

  get hasAllowlist(): boolean {
    return this.allowlist !== null;
  }

  /** Kernel block-device name (`loop3`, `vda1`) for a `/dev/...` path, following symlinks. */
  async kernelName(devPath: string): Promise<string> {
    let real: string;
    try {
      real = await realpath(devPath);
    } catch {
      throw new ProtectedDeviceError(`${devPath}: no such device`);
    }
    const st = await stat(real);
    if (!st.isBlockDevice()) throw new ProtectedDeviceError(`${devPath}: not a block device`);
    const major = Math.floor(st.rdev / 256) & 0xfff;
    const minor = (st.rdev & 0xff) | ((st.rdev >> 12) & 0xfff00);
    const link = await readlink(`${this.paths.sysDevBlock}/${major}:${minor}`).catch(() => null);
    return link ? basename(link) : basename(real);
  }

  /** The whole disk a partition belongs to (itself for a disk). */
  private async parentDisk(name: string): Promise<string> {
    const isPartition = (await readSys(`${this.paths.sysClassBlock}/${name}/partition`)) !== null;
    if (!isPartition) return name;
    const link = await readlink(`${this.paths.sysClassBlock}/${name}`).catch(() => null);
    return link ? basename(link.replace(/\/[^/]+$/, '')) : name;
  }

  private async devNameOf(majMin: string): Promise<string | null> {
    const link = await readlink(`${this.paths.sysDevBlock}/${majMin}`).catch(() => null);
    return link ? basename(link) : null;
  }

  /** Block devices that are in use right now: mounted filesystems and active swap. */
  private async inUse(): Promise<Map<string, string>> {
    const used = new Map<string, string>();
    const mounts = await readSys(this.paths.mountinfo);
    if (mounts === null) throw new ProtectedDeviceError(`the mount table (${this.paths.mountinfo}) cannot be read`);
    for (const line of mounts.split('\n')) {
      const fields = line.split(' ');
      if (fields.length < 5) continue;
      const sep = fields.indexOf('-');
      const source = sep > 0 ? fields[sep + 2] : undefined;
      // st_dev names the device for most filesystems; the source path catches btrfs-like anonymous ones.
      const names = [await this.devNameOf(fields[2]!)];
      if (source?.startsWith('/dev/')) names.push(await this.kernelName(source).catch(() => null));
      for (const name of names) if (name && !used.has(name)) used.set(name, `mounted at ${fields[4]}`);
    }
    for (const line of ((await readSys(this.paths.swaps)) ?? '').split('\n').slice(1)) {
      const dev = line.split(/\s+/)[0];
      if (!dev?.startsWith('/dev/')) continue;
      const name = await this.kernelName(dev).catch(() => null);
      if (name) used.set(name, 'in use as swap');
    }
    return used;
  }

  /**
   * Each attached loop device and where its data lives: the block device that is its backing file, or
   * the device holding the filesystem its backing file is on (`file`).
   */
  private async loops(): Promise<Map<string, { device: string; file: boolean }>> {
    const out = new Map<string, { device: string; file: boolean }>();
    for (const name of await listSys(this.paths.sysClassBlock)) {
      const backing = (await readSys(`${this.paths.sysClassBlock}/${name}/loop/backing_file`)) ?? '';
      if (!backing) continue;
      const st = await stat(backing).catch(() => null);
      if (!st) {
        // The path no longer leads to it (deleted, on a filesystem unmounted lazily, in another mount
        // namespace); the kernel still knows the device it lives on.
        const device = await this.backingDeviceOf(name);
        if (device) out.set(name, { device, file: true });
        continue;
      }
      if (st.isBlockDevice()) {
        const device = await this.kernelName(backing).catch(() => null);
        if (device) out.set(name, { device, file: false });
      } else {
        const device = await this.devNameOf(majorMinor(st.dev));
        if (device) out.set(name, { device, file: true });
      }
    }
    return out;
  }

  /** The device holding a loop's backing file, as the kernel recorded it at attach time (LOOP_GET_STATUS64). */
  private async backingDeviceOf(loop: string): Promise<string | null> {
    try {
      const { stdout } = await run('losetup', ['--noheadings', '--list', '--output', 'BACK-MAJ:MIN', `/dev/${loop}`], {
        timeoutMs: 10_000,
      });
      const majMin = stdout.trim();
      return /^\d+:\d+$/.test(majMin) ? await this.devNameOf(majMin) : null;
    } catch {
      return null;
    }
  }

  /**
   * Every device below a used one (its parent disk, its slaves, a loop's backing store, theirs), and every
   * loop device that is a window onto a protected one, with a sentence saying why.
   */
  private async protectedSet(loops: Map<string, { device: string; file: boolean }>): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    const visit = async (name: string, why: string, use: string): Promise<void> => {
      if (out.has(name)) return;
      out.set(name, why);
      const parent = await this.parentDisk(name);
      if (parent !== name) await visit(parent, `holds ${name}, which is ${use}`, use);
      for (const slave of await listSys(`${this.paths.sysClassBlock}/${name}/slaves`)) {
        await visit(slave, `is under ${name}, which is ${use}`, use);
      }
      const loop = loops.get(parent);
      if (loop) {
        const how = loop.file ? `holds the backing file of ${parent}` : `is the backing file of ${parent}`;
        await visit(loop.device, `${how}, which is ${parent === name ? use : `under ${name}, which is ${use}`}`, use);
      }
    };
    for (const [name, use] of await this.inUse()) await visit(name, `is ${use}`, use);
    // The other direction: writing a loop whose backing file is a protected device writes that device.
    for (let grew = true; grew; ) {
      grew = false;
      for (const [name, loop] of loops) {
        if (loop.file || out.has(name)) continue;
        const below = out.has(loop.device) ? loop.device : await this.parentDisk(loop.device);
        const reason = out.get(below);
        if (reason === undefined) continue;
        const why = `is a loop device onto ${loop.device}, which ${reason}`;
        out.set(name, why);
        // Its partitions write into the same device.
        for (const part of await listSys(`${this.paths.sysClassBlock}/${name}`)) {
          if (part.startsWith(name) && !out.has(part)) out.set(part, `is a partition of ${name}, which ${why}`);
        }
        grew = true;
      }
    }
    return out;
  }

  /** Null when the allow-list lets `name` be written, else why not. */
  private async notAllowed(
    name: string,
    loops: Map<string, { device: string; file: boolean }>,
    seen = new Set<string>(),
  ): Promise<string | null> {
    if (!this.allowlist) return null;
    const disk = await this.parentDisk(name);
    let listed = false;
    for (const entry of this.allowlist) {
      const allowedName = await this.kernelName(entry).catch(() => null);
      if (allowedName === name || allowedName === disk) listed = true;
    }
    if (!listed) return 'not on the device allow-list';
    // Writing a loop onto a block device writes that device.
    const loop = loops.get(disk);
    if (!loop || loop.file || seen.has(disk)) return null;
    seen.add(disk);
    const below = await this.notAllowed(loop.device, loops, seen);
    return below && `a loop device onto ${loop.device}, which is ${below}`;
  }

  /** Null when nothing holds the device for exclusive use, else what the kernel said. */
  private async claimed(devPath: string): Promise<string | null> {
    try {
      const fh = await open(devPath, constants.O_RDONLY | constants.O_EXCL | constants.O_NONBLOCK);
      await fh.close();
      return null;
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code;
      if (code === 'EBUSY')
        return 'held for exclusive use by the kernel (mounted, or part of RAID, LVM, swap or a multi-device filesystem)';
      return `cannot be opened (${code ?? (err as Error).message})`;
    }
  }

  async verdict(devPath: string): Promise<GuardVerdict> {
    let name: string;
    try {
      name = await this.kernelName(devPath);
    } catch (err) {
      return { ok: false, reason: (err as Error).message.replace(`${devPath}: `, '') };
    }
    // Read once for both questions (a loop whose backing file is gone costs a losetup each time).
    const loops = await this.loops();
    const notAllowed = await this.notAllowed(name, loops);
    if (notAllowed) return { ok: false, reason: `it is ${notAllowed}` };
    // A multipath path is the map's LUN, bypassing it (a protected map's paths are also protected below).
    const mpathPath = await pathOfMapReason(name, this.paths.sysClassBlock);
    if (mpathPath) return { ok: false, reason: `it is ${mpathPath}` };
    let reason: string | undefined;
    try {
      reason = (await this.protectedSet(loops)).get(name);
    } catch (err) {
      return { ok: false, reason: `whether it is in use cannot be told: ${(err as Error).message}` };
    }
    if (reason) return { ok: false, reason: `it ${reason}` };
    const array = await this.arrayOf(name);
    if (array)
      return { ok: false, reason: `it is ${array}: only the array may be written, or it must be stopped first` };
    const claim = await this.claimed(devPath);
    if (claim) return { ok: false, reason: `it is ${claim}` };
    return { ok: true };
  }

  /**
   * Which running md array `name` (or, for a whole disk, one of its partitions) is a member of, said as a
   * phrase; null when none. Writing a member alone would corrupt the array, whatever its state.
   */
  private async arrayOf(name: string): Promise<string | null> {
    const parts = (await listSys(`${this.paths.sysClassBlock}/${name}`)).filter((p) => p.startsWith(name));
    for (const dev of [name, ...parts]) {
      const md = (await listSys(`${this.paths.sysClassBlock}/${dev}/holders`)).find((h) => /^md/.test(h));
      if (md)
        return dev === name
          ? `a member of the software RAID array ${md}`
          : `the holder of ${dev}, a member of the software RAID array ${md}`;
    }
    return null;
  }

  /**
   * Throws ProtectedDeviceError unless the md array may be stopped and its members cleared: nothing of it is
   * mounted or swap, nothing is stacked on it, and every member's disk is on the allow-list (when one is set).
   */
  async assertArrayRemovable(mdPath: string): Promise<void> {
    const refuse = (why: string) =>
      new ProtectedDeviceError(`refusing to delete the software RAID array ${mdPath}: ${why}`);
    const name = await this.kernelName(mdPath);
    const loops = await this.loops();
    const used = await this.protectedSet(loops);
    const members = await listSys(`${this.paths.sysClassBlock}/${name}/slaves`);
    for (const dev of [name, ...members]) {
      const why = used.get(dev);
      if (why) throw refuse(`${dev} ${why}`);
      if (dev === name) continue;
      const notAllowed = await this.notAllowed(dev, loops);
      if (notAllowed) throw refuse(`its member ${dev} is ${notAllowed}`);
    }
    const above = await listSys(`${this.paths.sysClassBlock}/${name}/holders`);
    if (above.length > 0) throw refuse(`${above.join(', ')} ${above.length === 1 ? 'is' : 'are'} stacked on it`);
    const claim = await this.claimed(mdPath);
    if (claim) throw refuse(`it is ${claim}`);
  }

  /**
   * Throws ProtectedDeviceError unless a partition may be added to `diskPath`, a holder of software RAID members,
   * in its free room (the ESP IPA puts beside them): the disk is on the allow-list (when one is set) and nothing
   * on it is mounted or swap. Its members are left as they are, so their array does not stop it.
   */
  async assertPartitionAddable(diskPath: string, purpose: string): Promise<void> {
    const refuse = (why: string) => new ProtectedDeviceError(`refusing to ${purpose} ${diskPath}: ${why}`);
    const name = await this.kernelName(diskPath);
    const loops = await this.loops();
    const notAllowed = await this.notAllowed(name, loops);
    if (notAllowed) throw refuse(`it is ${notAllowed}`);
    const why = (await this.protectedSet(loops)).get(name);
    if (why) throw refuse(`it ${why}`);
  }

  /** Throws ProtectedDeviceError naming the device and why, unless it may be written now. */
  async assertWritable(devPath: string, purpose: string): Promise<void> {
    const v = await this.verdict(devPath);
    if (!v.ok) throw new ProtectedDeviceError(`refusing to ${purpose} ${devPath}: ${v.reason}`);
  }
}
