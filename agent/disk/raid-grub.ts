// GRUB for BIOS on a whole-disk image written onto a software RAID array. The firmware reads boot code from a
// disk, not from an array, so every holder disk needs GRUB's boot sector and core image, and only the image's own
// GRUB knows how it wants to boot: its grub-install and grub-mkconfig run in a chroot of its root filesystem, as
// IPA does. That runs the tenant's programs as root in the ramdisk (CVE-2026-43003), so it happens only when the
// operator opts in (enable_bios_bootloader_install). What the agent does itself stays inside the image's
// filesystem: every path it mounts on or writes is resolved component by component and refused when a symlink
// leads out (host/confined-path.ts); the binds into the chroot are slaves, so what its programs mount does not
// reach the ramdisk; every mount is undone however the work ends. The image is checked (its root found, GRUB and
// its BIOS modules there, its /boot resolved) before any disk is touched. On GPT holders GRUB's core image needs
// a BIOS boot partition, made in the room the RAID layout keeps in front of the RAID partitions; msdos holders
// have the gap after the MBR. Run again, what is done is found and kept (grub-install rewrites the same code).
import { constants } from 'node:fs';
import { lstat, mkdir, open, readFile, rm, symlink } from 'node:fs/promises';
import { CommandExecutionError, errorText, InvalidImage, SoftwareRAIDError } from '../errors.ts';
import { run } from '../exec.ts';
import { confinedDir, confinedPath, pathExists } from '../host/confined-path.ts';
import { MountStack, withMounted } from '../host/mounts.ts';
import type { TaskContext } from '../services.ts';
import { activeArrays, holderDisks } from './md.ts';
import { listPartitions, rescanPartitions, tableType, type Partition } from './partitions.ts';
import { addBootPartition, type BootPartitionSpec } from './holder-boot-partition.ts';
import { placeInFront } from './raid-layout.ts';

const MiB = 2 ** 20;
export const BIOS_BOOT_SIZE = 2 * MiB;
/** Where the BIOS boot partition starts: the usual first aligned sector, in front of the RAID partitions. */
const BIOS_BOOT_START = MiB;
const BIOS_BOOT_TYPE = 'ef02';
/** GPT's type GUID for a BIOS boot partition, as blkid reports it. */
const BIOS_BOOT_GUID = '21686148-6449-6e6f-744e-656564454649';
const LINUX_FILESYSTEMS = new Set(['ext2', 'ext3', 'ext4', 'xfs', 'btrfs']);
const CHROOT_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';
/** Where distributions keep GRUB's BIOS modules: Debian and Red Hat's families, and SUSE's. */
const BIOS_MODULE_DIRS = ['usr/lib/grub/i386-pc', 'usr/lib/grub2/i386-pc', 'usr/share/grub2/i386-pc'];
/** grub-install on a slow disk under emulation takes a minute; the limit is for a program that hangs. */
const GRUB_TIMEOUT_MS = 15 * 60_000;

export const biosBootLabel = (index: number) => `bios-boot-part-${index}`;

/** The i-th GPT holder's BIOS boot partition, in front of its RAID partitions. */
const biosBoot = (index: number): BootPartitionSpec => ({
  what: 'BIOS boot partition',
  start: BIOS_BOOT_START,
  size: BIOS_BOOT_SIZE,
  type: BIOS_BOOT_TYPE,
  label: biosBootLabel(index),
  otherMode: 'uefi',
});

const refuseImage = (why: string) => new InvalidImage(`Cannot install a BIOS boot loader from this image: ${why}`);

/**
 * Where the BIOS boot partition goes on a GPT holder: 1 MiB to 3 MiB (in the 8 MiB the BIOS layout keeps in front
 * of the RAID partitions), with the first partition number not in use; refused when a partition is there. Pure.
 */
export function biosBootPlacement(
  holder: string,
  partitions: readonly Pick<Partition, 'number' | 'start' | 'size'>[],
  sectorSize: number,
): { number: number; firstSector: number; lastSector: number } {
  return placeInFront(holder, partitions, sectorSize, biosBoot(0));
}

/**
 * /etc/default/grub with `rd.md.uuid=` for each array not named there yet, for images whose initramfs is dracut's
 * (it assembles only the arrays named so). The arguments go on a line of their own that extends
 * GRUB_CMDLINE_LINUX, which the file is sourced by: whatever form the image's own line has (quotes, comments,
 * `export`) stays as it is. Pure.
 */
export function withMdUuids(defaultGrub: string, uuids: readonly string[]): string {
  const add = uuids.map((u) => `rd.md.uuid=${u}`).filter((a) => !defaultGrub.includes(a));
  if (add.length === 0) return defaultGrub;
  const sep = defaultGrub === '' || defaultGrub.endsWith('\n') ? '' : '\n';
  return `${defaultGrub}${sep}# the software RAID arrays for dracut to assemble (ironic-node-agent)\nGRUB_CMDLINE_LINUX="\${GRUB_CMDLINE_LINUX} ${add.join(' ')}"\n`;
}

export type BootSource = { key: 'uuid' | 'label' | 'partuuid'; value: string } | { unresolved: string };

const BY_PATH: Readonly<Record<string, 'uuid' | 'label' | 'partuuid'>> = {
  'by-uuid': 'uuid',
  'by-label': 'label',
  'by-partuuid': 'partuuid',
};

/**
 * What the image's fstab mounts as /boot: a partition named by UUID, LABEL or PARTUUID (also as their
 * /dev/disk/by-* links), `unresolved` for a source that names no partition the agent can find (a kernel device
 * name, which differs between the ramdisk and the instance), or null when /boot is on the root filesystem. Pure.
 */
export function bootSourceOf(fstab: string): BootSource | null {
  for (const line of fstab.split('\n')) {
    const [source, target] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (!source || (target !== '/boot' && target !== '/boot/')) continue;
    const m = /^(UUID|LABEL|PARTUUID)=["']?([^"']+)["']?$/i.exec(source);
    if (m) return { key: m[1]!.toLowerCase() as 'uuid' | 'label' | 'partuuid', value: m[2]! };
    const link = /^\/dev\/disk\/(by-uuid|by-label|by-partuuid)\/(.+)$/.exec(source);
    if (link) return { key: BY_PATH[link[1]!]!, value: link[2]!.replace(/\\x2f/g, '/') };
    return { unresolved: source };
  }
  return null;
}

/** Whether a partition is the one `key` names: UUIDs in any case, labels exactly (as findfs reads them). */
function named(p: Partition, key: 'uuid' | 'label' | 'partuuid', value: string): boolean {
  const v = p[key];
  return v !== null && (key === 'label' ? v === value : v.toLowerCase() === value.toLowerCase());
}

interface GrubTools {
  install: string;
  mkconfig: string;
  cfg: string;
}

/** What the root filesystem mounted at `dir` offers: its GRUB programs and BIOS modules, dracut, its /boot. */
interface RootCheck {
  tools: GrubTools | null;
  biosModules: boolean;
  dracut: boolean;
  hasFstab: boolean;
  boot: BootSource | null;
}

async function inImage(dir: string, rel: string): Promise<boolean> {
  // an absolute symlink on the way (`sbin -> /usr/sbin`) would be read in the ramdisk: not found, as it should be
  try {
    return await pathExists(await confinedPath(dir, rel, { refuse: (why) => new Error(why) }));
  } catch {
    return false;
  }
}

async function checkRoot(dir: string): Promise<RootCheck> {
  let tools: GrubTools | null = null;
  for (const name of ['grub2', 'grub']) {
    for (const bin of ['usr/sbin', 'sbin', 'usr/bin', 'bin']) {
      if (!tools && (await inImage(dir, `${bin}/${name}-install`))) {
        tools = { install: `${name}-install`, mkconfig: `${name}-mkconfig`, cfg: `/boot/${name}/grub.cfg` };
      }
    }
  }
  let biosModules = false;
  for (const d of BIOS_MODULE_DIRS) biosModules ||= await inImage(dir, d);
  let dracut = false;
  for (const bin of ['usr/bin', 'usr/sbin', 'sbin', 'bin']) dracut ||= await inImage(dir, `${bin}/dracut`);
  const hasFstab = await inImage(dir, 'etc/fstab');
  const fstab = hasFstab
    ? await readFile(await confinedPath(dir, 'etc/fstab', { refuse: refuseImage }), 'utf8').catch(() => '')
    : '';
  return { tools, biosModules, dracut, hasFstab, boot: bootSourceOf(fstab) };
}

interface ImageRoot {
  partition: Partition;
  check: RootCheck & { tools: GrubTools };
  /** The array's partition the image mounts as /boot, when it is a separate one. */
  boot: Partition | null;
}

/**
 * The image's root partition on the array, checked: the one `rootUuid` names (filesystem UUID, PARTUUID or label,
 * as Ironic passes instance_info.image_rootfs_uuid), else the one Linux filesystem that is an installed system with
 * GRUB. A disk identifier (`0x…`, what write_image reports for a whole disk) names no partition and means "look".
 * Each candidate is mounted read-only to look; one that will not mount is passed over and named if none is found.
 */
async function imageRoot(ctx: TaskContext, md: string, rootUuid: string | null): Promise<ImageRoot> {
  await rescanPartitions(md, ctx.log);
  const parts = await listPartitions(md, ctx.log);
  const want = rootUuid && !rootUuid.toLowerCase().startsWith('0x') ? rootUuid : null;
  const byUuid = want
    ? parts.find((p) => named(p, 'uuid', want) || named(p, 'partuuid', want) || named(p, 'label', want))
    : undefined;
  if (want && !byUuid) ctx.log.warn({ rootUuid, md }, 'no partition with this UUID, PARTUUID or label; looking');
  const candidates = byUuid ? [byUuid] : parts.filter((x) => x.fstype !== null && LINUX_FILESYSTEMS.has(x.fstype));
  const found: { partition: Partition; check: RootCheck }[] = [];
  const passedOver: string[] = [];
  for (const p of candidates) {
    await ctx.guard.assertWritable(p.path, 'mount');
    try {
      const check = await withMounted(p.path, checkRoot, {
        log: ctx.log,
        options: 'ro,nosuid,nodev,noexec',
        prefix: 'ina-grub-probe-',
      });
      if (check.hasFstab && check.tools) found.push({ partition: p, check });
      else passedOver.push(`${p.path} (${p.fstype}: no ${check.hasFstab ? 'grub-install' : 'etc/fstab'})`);
    } catch (err) {
      if (err instanceof InvalidImage) throw err;
      ctx.log.warn({ partition: p.path, err: errorText(err) }, 'not mountable to look for the root');
      passedOver.push(`${p.path} (${p.fstype ?? 'no filesystem'}: ${errorText(err)})`);
    }
  }
  if (found.length !== 1) {
    const given = want && !byUuid ? `no partition has the UUID, PARTUUID or label ${want}; ` : '';
    throw refuseImage(
      found.length === 0
        ? `${given}no installed system with GRUB (etc/fstab and grub-install) on ${md}: ${[
            ...passedOver,
            ...parts.filter((p) => !candidates.includes(p)).map((p) => `${p.path} (${p.fstype ?? 'no filesystem'})`),
          ].join(', ')}`
        : `more than one installed system with GRUB on ${md} (${found.map((f) => f.partition.path).join(', ')}): set instance_info.image_rootfs_uuid to the root's UUID`,
    );
  }
  const { partition, check } = found[0]!;
  const tools = check.tools!;
  if (!check.biosModules) {
    throw refuseImage(
      `${partition.path} has ${tools.install} but no GRUB modules for BIOS (${BIOS_MODULE_DIRS.join(', ')}; Debian's grub-pc-bin, Red Hat's grub2-pc-modules)`,
    );
  }
  let boot: Partition | null = null;
  if (check.boot) {
    const source = check.boot;
    if ('unresolved' in source) {
      throw refuseImage(`its /boot is mounted from ${source.unresolved}, which names no partition the agent can find`);
    }
    boot = parts.find((p) => named(p, source.key, source.value)) ?? null;
    if (!boot) throw refuseImage(`its /boot (${source.key.toUpperCase()}=${source.value}) is not a partition on ${md}`);
  }
  return { partition, check: { ...check, tools }, boot };
}

/** The GPT holder's BIOS boot partition: the one there is, else one made where the layout kept room. */
async function biosBootPartition(ctx: TaskContext, holder: string, index: number, done: string[]): Promise<void> {
  await rescanPartitions(holder, ctx.log);
  const parts = await listPartitions(holder, ctx.log);
  if (parts.some((p) => p.partType?.toLowerCase() === BIOS_BOOT_GUID)) return;
  const made = await addBootPartition(ctx, holder, parts, biosBoot(index));
  done.push(`BIOS boot partition ${made.number} (${biosBootLabel(index)}) made on ${holder}`);
}

/** The UUIDs (mdadm's form) of every running array: what a dracut initramfs must be told to assemble. */
async function arrayUuids(ctx: TaskContext): Promise<string[]> {
  const out: string[] = [];
  for (const a of await activeArrays()) {
    const { stdout } = await run('mdadm', ['--detail', '--export', a.path], { log: ctx.log });
    const uuid = /^MD_UUID=(\S+)$/m.exec(stdout)?.[1];
    if (uuid) out.push(uuid);
  }
  return out;
}

/** Appends the arrays to the image's /etc/default/grub, written from outside the chroot without following links. */
async function addMdUuids(ctx: TaskContext, dir: string, done: string[]): Promise<void> {
  const file = await confinedPath(dir, 'etc/default/grub', { refuse: refuseImage });
  const before = await readFile(file, 'utf8').catch(() => '');
  const after = withMdUuids(before, await arrayUuids(ctx));
  if (after === before) return;
  try {
    const fh = await open(
      file,
      constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | constants.O_NOFOLLOW,
      0o644,
    );
    try {
      await fh.writeFile(after);
    } finally {
      await fh.close();
    }
  } catch (err) {
    throw refuseImage(`/etc/default/grub could not be written: ${errorText(err)}`);
  }
  done.push('rd.md.uuid added to GRUB_CMDLINE_LINUX (dracut)');
}

/** Runs one of the image's programs in the chroot; a failure says what it was doing. */
async function inChroot(ctx: TaskContext, root: string, args: string[], what: string): Promise<string> {
  ctx.signal.throwIfAborted();
  try {
    return (
      await run('chroot', [root, ...args], {
        log: ctx.log,
        timeoutMs: GRUB_TIMEOUT_MS,
        signal: ctx.signal,
        env: { PATH: CHROOT_PATH, LANG: 'C', LC_ALL: 'C', GRUB_DISABLE_OS_PROBER: 'true' },
      })
    ).stdout;
  } catch (err) {
    throw new CommandExecutionError(`${what} failed with ${errorText(err)}`);
  }
}

/**
 * The /dev/disk/by-uuid links udev would have made for the array's partitions, made where missing (the ramdisk
 * has no udev), and the links made, for removal. grub-mkconfig names the root by its UUID on the kernel line only
 * when that link exists, and otherwise writes the device name the ramdisk gave it (`root=/dev/md0p3`), which the
 * instance, assembling the array under another name, never has.
 */
async function uuidLinks(ctx: TaskContext, parts: readonly Partition[]): Promise<string[]> {
  const made: string[] = [];
  await mkdir('/dev/disk/by-uuid', { recursive: true });
  for (const p of parts) {
    // blkid's rendering of a filesystem's binary UUID; anything else is no name to make a link of
    if (!p.uuid || !/^[A-Za-z0-9-]+$/.test(p.uuid)) continue;
    const link = `/dev/disk/by-uuid/${p.uuid}`;
    if (await lstat(link).catch(() => null)) continue;
    await symlink(`../../${p.name}`, link);
    made.push(link);
  }
  if (made.length > 0) ctx.log.debug({ made }, 'by-uuid links made for grub-mkconfig');
  return made;
}

/** Mounts for the chroot, each on a folder proved to be inside the image; binds made slaves. */
async function chrootMounts(mounts: MountStack, dir: string, boot: Partition | null): Promise<void> {
  const inside = (rel: string) => confinedDir(dir, rel, refuseImage);
  if (boot) await mounts.mount([boot.path], await inside('boot'));
  for (const [rel, args, bind] of [
    ['dev', ['--bind', '/dev'], true],
    ['proc', ['-t', 'proc', 'proc'], false],
    ['sys', ['-t', 'sysfs', 'sysfs'], false],
    ['run', ['--bind', '/run'], true],
  ] as const) {
    if (rel === 'run' && !(await inImage(dir, 'run'))) continue;
    // what the image's programs mount below a bind stays in the chroot, not in the ramdisk's /dev or /run
    await mounts.mount(args, await inside(rel), { slave: bind });
  }
}

/**
 * Installs the image's GRUB for BIOS onto every holder disk of `md` and writes its grub.cfg. The caller has
 * checked the opt-in. Returns what was done, for the command's result.
 */
export async function installRaidGrub(ctx: TaskContext, md: string, rootUuid: string | null): Promise<string> {
  const holders = await holderDisks(md);
  if (holders.length === 0) throw new SoftwareRAIDError(`${md} has no member devices`);
  for (const h of holders) await ctx.guard.assertPartitionAddable(h, 'install a boot loader on');
  const root = await imageRoot(ctx, md, rootUuid);
  const done: string[] = [];
  for (const [i, h] of holders.entries()) {
    if ((await tableType(h, ctx.log)) === 'gpt') await biosBootPartition(ctx, h, i, done);
  }
  await ctx.guard.assertWritable(root.partition.path, 'mount the root filesystem');
  if (root.boot) await ctx.guard.assertWritable(root.boot.path, 'mount /boot');
  const { tools, dracut } = root.check;
  const mounts = new MountStack(ctx.log);
  const links: string[] = [];
  const unlinkAll = () => Promise.all(links.map((l) => rm(l, { force: true })));
  try {
    links.push(...(await uuidLinks(ctx, await listPartitions(md, ctx.log))));
    const dir = await mounts.mountAtNewDir([root.partition.path], 'ina-grub-root-');
    await chrootMounts(mounts, dir, root.boot);
    if (root.boot) done.push(`/boot from ${root.boot.path}`);
    // before any of the image's programs has run: nothing of it can have moved the file since it was checked
    if (dracut) await addMdUuids(ctx, dir, done);
    for (const h of holders) {
      await inChroot(ctx, dir, [tools.install, '--target=i386-pc', h], `Installing GRUB2 boot loader to device ${h}`);
      done.push(`GRUB installed on ${h}`);
    }
    // Red Hat's boot loader entries (BLS) take the kernel arguments from GRUB_CMDLINE_LINUX only when asked to
    const help = dracut ? await inChroot(ctx, dir, [tools.mkconfig, '--help'], `${tools.mkconfig} --help`) : '';
    const bls = help.includes('--update-bls-cmdline') ? ['--update-bls-cmdline'] : [];
    await inChroot(ctx, dir, [tools.mkconfig, ...bls, '-o', tools.cfg], `Generating ${tools.cfg}`);
    done.push(`${tools.cfg} written by ${tools.mkconfig}`);
    await run('sync', [], { log: ctx.log });
  } catch (err) {
    // this failure is the one to report, whatever the unmounting says
    await mounts.release();
    await unlinkAll();
    throw err;
  }
  const stuck = await mounts.release();
  await unlinkAll();
  if (stuck.length > 0) {
    throw new CommandExecutionError(`Unmounting after the boot loader install failed: ${stuck.join('; ')}`);
  }
  const p = root.partition;
  return `GRUB for BIOS from the image's root ${p.path} (${p.fstype} ${p.uuid ?? ''}) on ${holders.join(', ')}: ${done.join('; ')}`;
}
