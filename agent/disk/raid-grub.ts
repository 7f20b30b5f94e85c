// GRUB for BIOS on a whole-disk image written onto a software RAID array. The firmware reads boot code from a
// disk, not from an array, so every holder disk needs GRUB's boot sector and core image, and only the image's own
// GRUB knows how it wants to boot: its grub-install and grub-mkconfig run in a chroot of its root filesystem, as
// IPA does. That runs the tenant's programs as root in the ramdisk (CVE-2026-43003), so it happens only when the
// operator opts in (enable_bios_bootloader_install); each program runs with a time limit and dies with the agent,
// and every mount is undone however the work ends. On GPT holders GRUB's core image needs a BIOS boot partition,
// made in the room the RAID layout kept in front of the RAID partitions; msdos holders have the gap after the MBR.
// Run again, what is done is found and kept (grub-install itself rewrites the same boot code).
import { access, lstat, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { CommandExecutionError, errorText, InvalidImage, SoftwareRAIDError } from '../errors.ts';
import { run } from '../exec.ts';
import { MountStack, withMounted } from '../host/mounts.ts';
import type { TaskContext } from '../services.ts';
import { probe } from './blkid.ts';
import { activeArrays, holderDisks } from './md.ts';
import { listPartitions, rescanPartitions, tableType, type Partition } from './partitions.ts';
import { logicalSectorSize } from './sysfs.ts';

const MiB = 2 ** 20;
export const BIOS_BOOT_SIZE = 2 * MiB;
const BIOS_BOOT_TYPE = 'ef02';
/** GPT's type GUID for a BIOS boot partition, as blkid reports it. */
const BIOS_BOOT_GUID = '21686148-6449-6e6f-744e-656564454649';
const LINUX_FILESYSTEMS = new Set(['ext2', 'ext3', 'ext4', 'xfs', 'btrfs']);
const CHROOT_PATH = '/usr/sbin:/usr/bin:/sbin:/bin';
/** grub-install on a slow disk under emulation takes a minute; the limit is for a program that hangs. */
const GRUB_TIMEOUT_MS = 15 * 60_000;

export const biosBootLabel = (index: number) => `bios-boot-part-${index}`;

/**
 * Where the BIOS boot partition goes on a GPT holder: at the first free sector (sgdisk -F), 2 MiB long, with the
 * first partition number not in use; refused when that runs into a partition (no room was kept). Pure.
 */
export function biosBootPlacement(
  holder: string,
  partitions: readonly Pick<Partition, 'number' | 'start' | 'size'>[],
  firstFreeSector: number,
  sectorSize: number,
): { number: number; firstSector: number; lastSector: number } {
  const start = firstFreeSector * sectorSize;
  const end = start + BIOS_BOOT_SIZE;
  const inTheWay = partitions.find((p) => p.start < end && p.start + p.size > start);
  if (inTheWay) {
    throw new SoftwareRAIDError(
      `No room for the ${BIOS_BOOT_SIZE / MiB} MiB BIOS boot partition on ${holder} at ${(start / MiB).toFixed(2)} MiB: ` +
        `partition ${inTheWay.number} is there (was the RAID built for UEFI boot?)`,
    );
  }
  let number = 1;
  while (partitions.some((p) => p.number === number)) number++;
  return { number, firstSector: firstFreeSector, lastSector: end / sectorSize - 1 };
}

/**
 * /etc/default/grub with `rd.md.uuid=` for each array added to GRUB_CMDLINE_LINUX, for images whose initramfs is
 * dracut's (it assembles only the arrays named so); an array already named is not named twice. Pure.
 */
export function withMdUuids(defaultGrub: string, uuids: readonly string[]): string {
  const line = /^GRUB_CMDLINE_LINUX=(["']?)(.*?)\1[ \t]*$/m;
  const m = line.exec(defaultGrub);
  const current = m ? m[2]! : '';
  const add = uuids.map((u) => `rd.md.uuid=${u}`).filter((a) => !current.split(/\s+/).includes(a));
  if (add.length === 0) return defaultGrub;
  const value = `GRUB_CMDLINE_LINUX="${[current, ...add].filter((s) => s !== '').join(' ')}"`;
  if (m) return defaultGrub.replace(line, value);
  return `${defaultGrub}${defaultGrub === '' || defaultGrub.endsWith('\n') ? '' : '\n'}${value}\n`;
}

const exists = (path: string) =>
  access(path).then(
    () => true,
    () => false,
  );

/** The image's GRUB programs, by the name its distribution gives them (grub2-* on Red Hat's), or null. */
async function grubTools(root: string): Promise<{ install: string; mkconfig: string; cfg: string } | null> {
  for (const name of ['grub2', 'grub']) {
    for (const dir of ['/usr/sbin', '/sbin', '/usr/bin']) {
      if (await exists(join(root, dir, `${name}-install`))) {
        return { install: `${name}-install`, mkconfig: `${name}-mkconfig`, cfg: `/boot/${name}/grub.cfg` };
      }
    }
  }
  return null;
}

/** Whether a mounted filesystem is an installed system with GRUB: the root to run grub-install from. */
async function isGrubRoot(dir: string): Promise<boolean> {
  return (await exists(join(dir, 'etc', 'fstab'))) && (await grubTools(dir)) !== null;
}

/**
 * The image's root partition on the array: the one `rootUuid` names (filesystem UUID, PARTUUID or label, as
 * Ironic passes instance_info.image_rootfs_uuid), else the one Linux filesystem that is an installed system with
 * GRUB (each mounted read-only to look). A disk identifier (`0x…`, what write_image reports for a whole disk)
 * names no partition and so means "look".
 */
async function rootPartition(ctx: TaskContext, md: string, rootUuid: string | null): Promise<Partition> {
  await rescanPartitions(md, ctx.log);
  const parts = await listPartitions(md, ctx.log);
  const want = rootUuid?.toLowerCase();
  if (want && !want.startsWith('0x')) {
    const named = parts.find((p) => [p.uuid, p.partuuid, p.label].some((v) => v !== null && v.toLowerCase() === want));
    if (named) return named;
    ctx.log.warn({ rootUuid, md }, 'no partition with this UUID, PARTUUID or label; looking for the root');
  }
  const found: Partition[] = [];
  for (const p of parts.filter((x) => x.fstype !== null && LINUX_FILESYSTEMS.has(x.fstype))) {
    await ctx.guard.assertWritable(p.path, 'mount');
    if (await withMounted(p.path, isGrubRoot, { log: ctx.log, options: 'ro', prefix: 'ina-grub-probe-' })) {
      found.push(p);
    }
  }
  if (found.length === 1) return found[0]!;
  throw new InvalidImage(
    found.length === 0
      ? `No root filesystem with GRUB (etc/fstab and grub-install) on ${md}'s partitions ${parts.map((p) => `${p.path} (${p.fstype ?? 'no filesystem'})`).join(', ') || '(none)'}: a BIOS boot loader cannot be installed from this image`
      : `More than one root filesystem with GRUB on ${md} (${found.map((p) => p.path).join(', ')}): set instance_info.image_rootfs_uuid to the root's UUID`,
  );
}

async function firstFreeSector(ctx: TaskContext, holder: string): Promise<number> {
  const { stdout } = await run('sgdisk', ['-F', holder], { log: ctx.log });
  const n = Number(stdout.trim().split('\n').at(-1));
  if (!Number.isInteger(n) || n <= 0) throw new SoftwareRAIDError(`sgdisk -F ${holder} gave no free sector: ${stdout}`);
  return n;
}

/** The GPT holder's BIOS boot partition: the one there is, else one made where the layout kept room. */
async function biosBootPartition(ctx: TaskContext, holder: string, index: number, done: string[]): Promise<void> {
  await rescanPartitions(holder, ctx.log);
  const parts = await listPartitions(holder, ctx.log);
  if (parts.some((p) => p.partType?.toLowerCase() === BIOS_BOOT_GUID)) return;
  const at = biosBootPlacement(holder, parts, await firstFreeSector(ctx, holder), await logicalSectorSize(holder));
  await ctx.guard.assertPartitionAddable(holder, 'add a BIOS boot partition to');
  const label = biosBootLabel(index);
  await run(
    'sgdisk',
    [
      '-n',
      `${at.number}:${at.firstSector}:${at.lastSector}`,
      '-t',
      `${at.number}:${BIOS_BOOT_TYPE}`,
      '-c',
      `${at.number}:${label}`,
      holder,
    ],
    { log: ctx.log },
  );
  await rescanPartitions(holder, ctx.log, [at.number]);
  done.push(`BIOS boot partition ${at.number} (${label}) made on ${holder}`);
}

/** The UUIDs (mdadm's form) of the arrays on `holders`: what a dracut initramfs must be told to assemble. */
async function arrayUuids(ctx: TaskContext, holders: readonly string[]): Promise<string[]> {
  const out: string[] = [];
  for (const a of await activeArrays()) {
    if (!(await holderDisks(a.path)).some((d) => holders.includes(d))) continue;
    const { stdout } = await run('mdadm', ['--detail', '--export', a.path], { log: ctx.log });
    const uuid = /^MD_UUID=(\S+)$/m.exec(stdout)?.[1];
    if (uuid) out.push(uuid);
  }
  return out;
}

/** Runs one of the image's programs in the chroot; a failure says what it was installing. */
async function inChroot(ctx: TaskContext, root: string, args: string[], what: string): Promise<void> {
  try {
    await run('chroot', [root, ...args], {
      log: ctx.log,
      timeoutMs: GRUB_TIMEOUT_MS,
      env: { PATH: CHROOT_PATH, LANG: 'C', LC_ALL: 'C', GRUB_DISABLE_OS_PROBER: 'true' },
    });
  } catch (err) {
    throw new CommandExecutionError(`${what} failed with ${errorText(err)}`);
  }
}

/**
 * Installs the image's GRUB for BIOS onto every holder disk of `md` and writes its grub.cfg. The caller has
 * checked the opt-in. Returns what was done, for the command's result.
 */
export async function installRaidGrub(ctx: TaskContext, md: string, rootUuid: string | null): Promise<string> {
  const holders = await holderDisks(md);
  if (holders.length === 0) throw new SoftwareRAIDError(`${md} has no member devices`);
  const done: string[] = [];
  for (const h of holders) await ctx.guard.assertPartitionAddable(h, 'install a boot loader on');
  for (const [i, h] of holders.entries()) {
    if ((await tableType(h, ctx.log)) === 'gpt') await biosBootPartition(ctx, h, i, done);
  }
  const root = await rootPartition(ctx, md, rootUuid);
  await ctx.guard.assertWritable(root.path, 'mount the root filesystem');
  const mounts = new MountStack(ctx.log);
  try {
    const dir = await mounts.mountAtNewDir([root.path], 'ina-grub-root-');
    const tools = await grubTools(dir);
    if (!tools) throw new InvalidImage(`The root filesystem ${root.path} has no grub-install or grub2-install`);
    if (!(await exists(join(dir, 'usr', 'lib', tools.install.replace('-install', ''), 'i386-pc')))) {
      throw new InvalidImage(
        `The image on ${md} has no GRUB for BIOS (usr/lib/${tools.install.replace('-install', '')}/i386-pc is missing; Debian's grub-pc-bin)`,
      );
    }
    const boot = await bootPartition(ctx, md, dir);
    if (boot) {
      await ctx.guard.assertWritable(boot.path, 'mount /boot');
      await mounts.mount([boot.path], join(dir, 'boot'));
      done.push(`/boot from ${boot.path}`);
    }
    await mounts.mount(['--bind', '/dev'], join(dir, 'dev'));
    await mounts.mount(['-t', 'proc', 'proc'], join(dir, 'proc'));
    await mounts.mount(['-t', 'sysfs', 'sysfs'], join(dir, 'sys'));
    if (await exists(join(dir, 'run'))) await mounts.mount(['--bind', '/run'], join(dir, 'run'));
    for (const h of holders) {
      await inChroot(ctx, dir, [tools.install, '--target=i386-pc', h], `Installing GRUB2 boot loader to device ${h}`);
      done.push(`GRUB installed on ${h}`);
    }
    if (await isDracut(dir)) {
      const file = join(dir, 'etc', 'default', 'grub');
      // written from outside the chroot: a symlink in the image must not lead the write into the ramdisk
      if ((await lstat(file).catch(() => null))?.isSymbolicLink()) {
        throw new InvalidImage(`/etc/default/grub in the image on ${root.path} is a symlink`);
      }
      const before = await readFile(file, 'utf8').catch(() => '');
      const after = withMdUuids(before, await arrayUuids(ctx, holders));
      if (after !== before) {
        await writeFile(file, after);
        done.push('rd.md.uuid added to GRUB_CMDLINE_LINUX (dracut)');
      }
    }
    await inChroot(ctx, dir, [tools.mkconfig, '-o', tools.cfg], `Generating ${tools.cfg}`);
    done.push(`${tools.cfg} written by ${tools.mkconfig}`);
    await run('sync', [], { log: ctx.log });
  } catch (err) {
    // this failure is the one to report, whatever the unmounting says
    await mounts.release();
    throw err;
  }
  const stuck = await mounts.release();
  if (stuck.length > 0) {
    throw new CommandExecutionError(`Unmounting after the boot loader install failed: ${stuck.join('; ')}`);
  }
  const fs = await probe(root.path, ctx.log);
  return `GRUB for BIOS from the image's root ${root.path} (${fs.fstype ?? 'unknown'} ${fs.uuid ?? ''}) on ${holders.join(', ')}: ${done.join('; ')}`;
}

/**
 * The fstab source of the image's separate /boot (`UUID=…`, `LABEL=…`, `PARTUUID=…`), or null when /boot is on
 * the root filesystem. Pure.
 */
export function bootSourceOf(fstab: string): { key: 'uuid' | 'label' | 'partuuid'; value: string } | null {
  for (const line of fstab.split('\n')) {
    const [source, target] = line.replace(/#.*/, '').trim().split(/\s+/);
    if (target !== '/boot' || !source) continue;
    const m = /^(UUID|LABEL|PARTUUID)=["']?([^"']+)["']?$/i.exec(source);
    if (m) return { key: m[1]!.toLowerCase() as 'uuid' | 'label' | 'partuuid', value: m[2]! };
  }
  return null;
}

/** The array's partition the image mounts as /boot, or null; a /boot it names but the array lacks is refused. */
async function bootPartition(ctx: TaskContext, md: string, root: string): Promise<Partition | null> {
  const fstab = join(root, 'etc', 'fstab');
  if ((await lstat(fstab).catch(() => null))?.isSymbolicLink()) return null;
  const source = bootSourceOf(await readFile(fstab, 'utf8').catch(() => ''));
  if (!source) return null;
  const found = (await listPartitions(md, ctx.log)).find(
    (p) => p[source.key]?.toLowerCase() === source.value.toLowerCase(),
  );
  if (!found) {
    throw new InvalidImage(
      `The image's /boot (${source.key.toUpperCase()}=${source.value}) is not a partition on ${md}`,
    );
  }
  return found;
}

async function isDracut(root: string): Promise<boolean> {
  for (const dir of ['usr/bin', 'usr/sbin', 'sbin', 'bin']) if (await exists(join(root, dir, 'dracut'))) return true;
  return false;
}
