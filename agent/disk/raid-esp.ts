// The EFI system partition of a whole-disk image written onto a software RAID array, made into one the firmware
// can boot from, as IPA does: the firmware cannot read md, so every holder disk gets an ESP of its own in the room
// the RAID layout left in front of its RAID partitions (GPT name `uefi-holder-<i>`), those partitions become a
// RAID-1 with its superblock at their end (metadata 1.0: each reads as a plain FAT filesystem), and the image's
// ESP is copied there file by file, into a FAT made with the image ESP's serial and label so that the installed
// system's fstab finds it. The image's own ESP is then wiped, leaving one filesystem with that identity. Files go
// through mtools, so no FAT from an image is ever mounted. Run again, each part that is done is found and kept.
import { mkdir, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { DeviceNotFound, SoftwareRAIDError } from '../errors.ts';
import { run } from '../exec.ts';
import { withTempDir } from '../host/temp-dir.ts';
import { listSys, readSys } from '../host/sysfs.ts';
import type { TaskContext } from '../services.ts';
import { probe } from './blkid.ts';
import { findEfiLoaders, type EfiLoader } from './efi-loaders.ts';
import { activeArrays, holderDisks } from './md.ts';
import { findEsp } from './partition-uuids.ts';
import { listPartitions, rescanPartitions, type Partition } from './partitions.ts';
import { addBootPartition, type BootPartitionSpec } from './holder-boot-partition.ts';
import { placeInFront } from './raid-layout.ts';
import { kernelNameOf, SYS_BLOCK } from './sysfs.ts';

const MiB = 2 ** 20;
/** IPA's ESP size, and where the layout's room for it starts (the usual first aligned sector). */
export const ESP_SIZE = 550 * MiB;
const ESP_START = MiB;
const ESP_TYPE = 'ef00';
const MTOOLS_ENV = { MTOOLS_SKIP_CHECK: '1' };

export const holderEspLabel = (index: number) => `uefi-holder-${index}`;

/** The i-th holder's ESP, as IPA makes it. */
const holderEspSpec = (index: number): BootPartitionSpec => ({
  what: 'EFI system partition',
  start: ESP_START,
  size: ESP_SIZE,
  type: ESP_TYPE,
  label: holderEspLabel(index),
  otherMode: 'bios',
});

/**
 * Where the ESP goes on a holder: 1 MiB to 551 MiB, in logical sectors for sgdisk, with the first partition
 * number not in use. Refuses when a partition is in the way (a layout made for BIOS boot). Pure.
 */
export function espPlacement(
  holder: string,
  partitions: readonly Pick<Partition, 'number' | 'start' | 'size'>[],
  sectorSize: number,
): { number: number; firstSector: number; lastSector: number } {
  return placeInFront(holder, partitions, sectorSize, holderEspSpec(0));
}

/** mkfs.vfat's volume id (`-i`) for a FAT serial as blkid prints it (`ABCD-1234`); null when it is not one. */
export function fatVolumeId(uuid: string | null): string | null {
  const hex = (uuid ?? '').replace('-', '');
  return /^[0-9A-Fa-f]{8}$/.test(hex) ? hex.toUpperCase() : null;
}

/** The boot entry label for a loader on the i-th holder's ESP (IPA's suffix, so each holder has its own entry). */
export const raidEntryLabel = (label: string, index: number) => `${label} (RAID, part${index})`;

export interface HolderEsp {
  holder: string;
  partition: Partition;
}

export interface RaidEsp {
  /** The array's root device (`/dev/md0`) and the image's ESP on it (`/dev/md0p1`). */
  device: string;
  imageEsp: string;
  /** The ESP array (`/dev/md1`), and each holder's member of it, in holder order. */
  espArray: string;
  holders: HolderEsp[];
  loaders: EfiLoader[];
  /** What was done, for the command's result. */
  done: string[];
}

async function deviceBytes(dev: string): Promise<number> {
  return Number((await readSys(`${SYS_BLOCK}/${kernelNameOf(dev)}/size`)) ?? 0) * 512;
}

/** The holder's `uefi-holder-<index>` partition, made in the room the layout kept when there is none yet. */
async function holderEsp(ctx: TaskContext, holder: string, index: number, done: string[]): Promise<Partition> {
  const label = holderEspLabel(index);
  await rescanPartitions(holder, ctx.log);
  const parts = await listPartitions(holder, ctx.log);
  const found = parts.find((p) => p.partLabel === label);
  if (found) return found;
  const made = await addBootPartition(ctx, holder, parts, holderEspSpec(index));
  done.push(`${made.path} made`);
  return made;
}

async function hasSuperblock(ctx: TaskContext, dev: string): Promise<boolean> {
  return (await run('mdadm', ['--examine', dev], { log: ctx.log, okCodes: [1, 2] })).exitCode === 0;
}

/** The lowest /dev/mdN the kernel does not have (IPA's next free RAID device). */
async function freeMdDevice(): Promise<string> {
  const taken = new Set((await listSys(SYS_BLOCK)).filter((n) => /^md\d+$/.test(n)));
  for (let n = 0; n < 128; n++) if (!taken.has(`md${n}`)) return `/dev/md${n}`;
  throw new SoftwareRAIDError('No free md device number below 128 for the EFI system partition array');
}

/** The RAID-1 of the holders' ESPs: the running one, else assembled from their superblocks, else created. */
async function espArray(ctx: TaskContext, parts: readonly Partition[], done: string[]): Promise<string> {
  const log = ctx.log;
  const names = parts.map((p) => p.name);
  const running = (await activeArrays()).find((a) => a.members.some((m) => names.includes(m)));
  if (running) {
    for (const p of parts.filter((x) => !running.members.includes(x.name))) {
      await run('mdadm', ['--add', running.path, p.path], { log });
      done.push(`${p.path} added to ${running.path}`);
    }
    return running.path;
  }
  const device = await freeMdDevice();
  const paths = parts.map((p) => p.path);
  if (await hasSuperblock(ctx, paths[0]!)) {
    await run('mdadm', ['--assemble', '--run', device, ...paths], { log });
    done.push(`${device} assembled from ${paths.join(', ')}`);
    return device;
  }
  await run(
    'mdadm',
    [
      '--create',
      device,
      '--force',
      '--run',
      '--metadata=1.0',
      '--level',
      '1',
      '--name',
      'esp',
      '--raid-devices',
      String(paths.length),
      ...paths,
    ],
    { log },
  );
  done.push(`${device} created (RAID-1, metadata 1.0) on ${paths.join(', ')}`);
  return device;
}

/** Every file of a FAT device's tree, copied into `tree` (empty when the filesystem is). */
async function extract(ctx: TaskContext, dev: string, tree: string): Promise<void> {
  await mkdir(tree);
  const listing = await run('mdir', ['-b', '-i', dev, '::/'], { env: MTOOLS_ENV, log: ctx.log });
  if (listing.stdout.trim() === '') return;
  await run('mcopy', ['-s', '-p', '-m', '-n', '-i', dev, '::/*', tree], { env: MTOOLS_ENV, log: ctx.log });
}

async function treeBytes(dir: string): Promise<number> {
  let total = 0;
  for (const e of await readdir(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    total += e.isDirectory() ? await treeBytes(path) : (await stat(path)).size;
  }
  return total;
}

/** The image ESP's files into a new FAT on the ESP array, with its serial and label; then the image ESP wiped. */
async function copyEsp(ctx: TaskContext, from: string, to: string): Promise<string> {
  const log = ctx.log;
  const id = await probe(from, log);
  await ctx.guard.assertWritable(to, 'make the EFI system partition filesystem on');
  await ctx.guard.assertWritable(from, 'wipe the copied EFI system partition');
  await withTempDir('ina-raid-esp-', async (work) => {
    const tree = join(work, 'tree');
    await extract(ctx, from, tree);
    const used = await treeBytes(tree);
    const size = await deviceBytes(to);
    if (used > size) throw new SoftwareRAIDError(`ESP content (${used} bytes) exceeds md device size (${size} bytes)`);
    const volumeId = fatVolumeId(id.uuid);
    await run('mkfs.vfat', ['-n', id.label ?? 'esp', ...(volumeId ? ['-i', volumeId] : []), to], { log });
    const entries = await readdir(tree);
    if (entries.length > 0) {
      await run('mcopy', ['-s', '-p', '-m', '-i', to, ...entries.map((e) => join(tree, e)), '::/'], {
        env: MTOOLS_ENV,
        log,
      });
    }
  });
  await run('wipefs', ['-a', from], { log });
  return `${from} copied to ${to} (FAT serial ${id.uuid ?? 'new'}, label ${id.label ?? 'esp'}) and wiped`;
}

/**
 * The image ESP on `device` and where its loaders are now: the image ESP itself before the first run, the ESP
 * array after it (the image ESP wiped). No loaders: none found (the image is not UEFI-bootable this way).
 * Touches no disk.
 */
export async function raidEspSource(
  ctx: TaskContext,
  device: string,
): Promise<{ imageEsp: Partition; loaders: EfiLoader[] }> {
  const imageEsp = await findEsp(ctx, device);
  if (!imageEsp) {
    throw new DeviceNotFound(
      `No EFI partition could be detected on device ${device}. Are you using a UEFI-compatible image?`,
    );
  }
  if (imageEsp.fstype === 'vfat') return { imageEsp, loaders: await findEfiLoaders(imageEsp.path, ctx.log) };
  // Copied and wiped by an earlier run: the array of the holders' ESPs has them.
  const holders = await holderDisks(device);
  for (const [i, holder] of holders.entries()) {
    const part = (await listPartitions(holder, ctx.log)).find((p) => p.partLabel === holderEspLabel(i));
    const array = part && (await activeArrays()).find((a) => a.members.includes(part.name));
    if (array && (await probe(array.path, ctx.log)).fstype === 'vfat')
      return { imageEsp, loaders: await findEfiLoaders(array.path, ctx.log) };
  }
  return { imageEsp, loaders: [] };
}

/** Gives every holder of `device` its ESP, in one RAID-1 holding the image ESP's files. */
export async function buildRaidEsp(ctx: TaskContext, device: string): Promise<RaidEsp> {
  const { imageEsp, loaders } = await raidEspSource(ctx, device);
  const holders = await holderDisks(device);
  if (holders.length === 0) throw new SoftwareRAIDError(`${device} has no member devices`);
  const done: string[] = [];
  const parts: Partition[] = [];
  for (const [i, holder] of holders.entries()) parts.push(await holderEsp(ctx, holder, i, done));
  const array = await espArray(ctx, parts, done);
  await rescanPartitions(array, ctx.log);
  const current = await probe(imageEsp.path, ctx.log);
  if (current.fstype === 'vfat') done.push(await copyEsp(ctx, imageEsp.path, array));
  else if ((await probe(array, ctx.log)).fstype === 'vfat') done.push(`${array} holds the EFI files already`);
  else {
    throw new SoftwareRAIDError(
      `Neither the image's EFI system partition ${imageEsp.path} nor the EFI system partition array ${array} carries a FAT filesystem: there are no boot loader files to copy`,
    );
  }
  return {
    device,
    imageEsp: imageEsp.path,
    espArray: array,
    holders: holders.map((holder, i) => ({ holder, partition: parts[i]! })),
    loaders,
    done,
  };
}
