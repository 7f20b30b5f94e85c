// Building and tearing down software RAID (Linux md) as IPA does: the holders are checked with the device
// guard and for partitions before any is written, then partitioned (parted), and each array made with
// `mdadm --create --metadata=1`. Tearing down wipes and stops every active array the guard lets go, clears
// the members' superblocks, sweeps stale superblocks off the listed disks, and wipes the holders' tables.
import { SoftwareRAIDError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { listSys, readSys } from '../host/sysfs.ts';
import type { TaskContext } from '../services.ts';
import { allowlistedNames, ipaView, listBlockDevices, type BlockDevice } from './block-devices.ts';
import { matchesHints } from './hints.ts';
import { rescanPartitions } from './partitions.ts';
import { validateRaidConfig, wantsSoftwareRaid, type LogicalDisk } from './raid-config.ts';
import {
  bootModeOf,
  firstRaidStart,
  partitionTableType,
  planRaid,
  type BootMode,
  rootVolumesOf,
  type Holder,
  type RaidPlan,
} from './raid-layout.ts';
import { parseHintsOrThrow } from './skip-list.ts';
import { kernelNameOf, SYS_BLOCK } from './sysfs.ts';
import { isObject } from '../parse.ts';

/** An md array the kernel runs now. */
export interface ActiveArray {
  name: string;
  path: string;
  /** lsblk's TYPE for it: `raid1`, `raid0`, …, from /sys/block/<md>/md/level. */
  level: string | null;
  /** Kernel names of its member devices (partitions, usually). */
  members: string[];
}

/** Every md array the kernel knows, read from sysfs (no udev in the ramdisk). */
export async function activeArrays(sysBlock = SYS_BLOCK): Promise<ActiveArray[]> {
  const out: ActiveArray[] = [];
  for (const name of await listSys(sysBlock)) {
    if (!/^md\d+$/.test(name)) continue;
    out.push({
      name,
      path: `/dev/${name}`,
      level: await readSys(`${sysBlock}/${name}/md/level`),
      members: await memberNames(`/dev/${name}`, sysBlock),
    });
  }
  return out.sort((a, b) => Number(a.name.slice(2)) - Number(b.name.slice(2)));
}

/** The whole disk a partition's kernel name belongs to (itself for a disk). */
async function diskOf(name: string, sysBlock = SYS_BLOCK): Promise<string> {
  // /sys/block lists whole disks only; a partition is a folder of its disk's.
  for (const disk of await listSys(sysBlock)) {
    if (disk !== name && (await listSys(`${sysBlock}/${disk}`)).includes(name)) return disk;
  }
  return name;
}

/** Whether `path` is an md array's device (`/dev/md0`, `/dev/md127`), not one of its partitions. */
export function isMdDevice(path: string): boolean {
  return /^\/dev\/md\d+$/.test(path);
}

/** Kernel names of the member devices (partitions, usually) of the md array `path`; none once it is stopped. */
export function memberNames(path: string, sysBlock = SYS_BLOCK): Promise<string[]> {
  return listSys(`${sysBlock}/${kernelNameOf(path)}/slaves`);
}

/** The whole disks that hold the members of the md array `path`, in member order, each once. */
export async function holderDisks(path: string, sysBlock = SYS_BLOCK): Promise<string[]> {
  const out: string[] = [];
  for (const member of await memberNames(path, sysBlock)) {
    const disk = `/dev/${await diskOf(member, sysBlock)}`;
    if (!out.includes(disk)) out.push(disk);
  }
  return out;
}

function skipVolumeNames(node: unknown): string[] {
  const props = isObject(node) && isObject(node.properties) ? node.properties : {};
  const list = Array.isArray(props.skip_block_devices) ? props.skip_block_devices : [];
  return list.flatMap((e) => (isObject(e) && typeof e.volume_name === 'string' ? [e.volume_name] : []));
}

function nodeUuid(node: unknown): string {
  return isObject(node) && typeof node.uuid === 'string' ? node.uuid : 'this node';
}

/**
 * The disks RAID may be built on: whole disks the agent lists (IPA's list, without its skip list), within the
 * device allow-list when one is set (a disk outside it is none of the agent's).
 */
async function raidDisks(ctx: TaskContext): Promise<BlockDevice[]> {
  const allow = ctx.config.disks.allowlist;
  const allowed = await allowlistedNames(allow);
  return (await listBlockDevices(ctx)).filter(
    (d) => (d.type === 'disk' || d.type === 'loop') && (allow === null || allowed.has(d.name)),
  );
}

const holderOf = (d: BlockDevice): Holder => ({
  path: d.path,
  name: d.name,
  size: d.size,
  logicalSectorSize: d.logicalSectorSize,
});

/** IPA's holder choice: one device per hint (the first match not yet taken), or every listed disk. */
export function chooseHolders(ld: LogicalDisk, disks: readonly BlockDevice[]): BlockDevice[] {
  if (!ld.physicalDisks) return [...disks];
  const chosen: BlockDevice[] = [];
  for (const hint of ld.physicalDisks) {
    const parsed = parseHintsOrThrow(hint, 'physical_disks hints');
    const matches = disks.filter((d) => matchesHints(ipaView(d), parsed));
    const list = disks.map((d) => d.path).join(', ');
    if (matches.length === 0) {
      throw new SoftwareRAIDError(`No candidates for physical disk ${JSON.stringify(hint)} from the list [${list}]`);
    }
    const free = matches.find((d) => !chosen.includes(d));
    if (!free) {
      throw new SoftwareRAIDError(
        `No candidates left for physical disk ${JSON.stringify(hint)} from the list [${list}]`,
      );
    }
    chosen.push(free);
  }
  return chosen;
}

/** Whether parted sees partitions on the disk (a disk parted cannot read counts as empty, as in IPA). */
async function hasPartitions(ctx: TaskContext, disk: string): Promise<boolean> {
  try {
    const { stdout } = await run('parted', ['-s', '-m', disk, 'unit', 'MiB', 'print'], { log: ctx.log });
    return stdout.split('\n').filter((l) => /^\d+:/.test(l)).length > 0;
  } catch {
    return false;
  }
}

async function ramdiskBootMode(): Promise<BootMode> {
  return (await listSys('/sys/firmware/efi')).length > 0 ? 'uefi' : 'bios';
}

/**
 * Validates `config` against the disks there are, picks the holders and plans the layout: everything
 * that can refuse, with no disk touched. Null when there is nothing to build. `lenient` is the clean step's
 * way (IPA's create_configuration): a config naming only other controllers is none of the agent's business
 * and builds nothing; apply_configuration validates whatever it is given, so such a config is refused.
 */
export async function planFor(
  ctx: TaskContext,
  config: unknown,
  node: unknown,
  how: 'lenient' | 'strict',
): Promise<RaidPlan | null> {
  const listed = isObject(config) && Array.isArray(config.logical_disks) && config.logical_disks.length > 0;
  if (how === 'lenient' && listed && !wantsSoftwareRaid(config)) return null;
  const disks = await raidDisks(ctx);
  const logical = validateRaidConfig(config, {
    nodeUuid: nodeUuid(node),
    diskCount: disks.length,
    skipVolumeNames: skipVolumeNames(node),
  });
  if (!logical) return null;
  const holdersOf = logical.map((ld) => chooseHolders(ld, disks));
  const bootMode = bootModeOf(node, await ramdiskBootMode());
  const table = partitionTableType(node, bootMode);
  // msdos: the real first free sector is read after the label is written; 2048 is what parted leaves.
  const start = firstRaidStart(bootMode, table, 2048);
  return planRaid(
    logical,
    holdersOf.map((hs) => hs.map(holderOf)),
    bootMode,
    table,
    start,
  );
}

/**
 * Builds the planned arrays. Every holder is checked (guard, no partitions) before the first is written. Once all
 * arrays run, their `is_root_volume` becomes what the root device choice obeys (`state.raidRootVolumes`).
 */
export async function createRaid(ctx: TaskContext, plan: RaidPlan): Promise<void> {
  const log = ctx.log;
  for (const h of plan.holders) await ctx.guard.assertWritable(h.path, 'build software RAID on');
  const partitioned: string[] = [];
  for (const h of plan.holders) if (await hasPartitions(ctx, h.path)) partitioned.push(h.path);
  if (partitioned.length > 0) {
    throw new SoftwareRAIDError(`Partitions detected on devices ${partitioned.join(', ')} during RAID config`);
  }
  // From the first write on, the arrays the last build remembered may be gone or renumbered.
  ctx.state.raidRootVolumes = new Map();
  for (const h of plan.holders) {
    ctx.signal.throwIfAborted();
    await run('parted', [h.path, '-s', '--', 'mklabel', plan.table], { log }).catch((err) => {
      throw new SoftwareRAIDError(`Failed to create partition table on ${h.path}: ${errorText(err)}`);
    });
  }
  let current = plan;
  if (plan.table === 'msdos') {
    const { stdout } = await run('sgdisk', ['-F', plan.holders[0]!.path], { log });
    const first = Number(stdout.trim().split('\n').at(-1));
    if (!Number.isInteger(first) || first <= 0)
      throw new SoftwareRAIDError(`sgdisk -F printed no first sector: ${stdout}`);
    const logical = plan.arrays.map((a) => a.logicalDisk).sort((a, b) => a.position - b.position);
    const holdersOf = logical.map((ld) => plan.arrays.find((a) => a.logicalDisk === ld)!.members.map((m) => m.holder));
    const byPath = new Map(plan.holders.map((h) => [h.path, h]));
    current = planRaid(
      logical,
      holdersOf.map((ps) => ps.map((p) => byPath.get(p)!)),
      plan.bootMode,
      plan.table,
      firstRaidStart(plan.bootMode, plan.table, first),
    );
  }
  for (const h of current.holders) {
    const parts = current.partitions.get(h.path)!;
    for (const p of parts) {
      ctx.signal.throwIfAborted();
      await run('parted', [h.path, '-s', '-a', 'optimal', '--', 'mkpart', 'primary', p.start, p.end], { log }).catch(
        (err) => {
          throw new SoftwareRAIDError(`Failed to create partitions on ${h.path}: ${errorText(err)}`);
        },
      );
    }
    await rescanPartitions(
      h.path,
      log,
      parts.map((p) => p.number),
    );
  }
  for (const a of current.arrays) {
    ctx.signal.throwIfAborted();
    await run('mdadm', a.mdadmArgs, { log }).catch((err) => {
      throw new SoftwareRAIDError(
        `Failed to create md device ${a.device} on ${a.members.map((m) => m.device).join(', ')}: ${errorText(err)}`,
      );
    });
    log.info(
      { array: a.device, level: a.level, name: a.name, members: a.members.map((m) => m.device) },
      'md array created',
    );
  }
  ctx.state.raidRootVolumes = rootVolumesOf(current);
  if (ctx.state.raidRootVolumes.size > 0) {
    log.info({ isRootVolume: Object.fromEntries(ctx.state.raidRootVolumes) }, 'software RAID root volumes remembered');
  }
}

/** Whether `dev` carries an md superblock (mdadm --examine exits 0 only then). */
async function hasSuperblock(ctx: TaskContext, dev: string): Promise<boolean> {
  const r = await run('mdadm', ['--examine', dev], { log: ctx.log, okCodes: [1, 2] });
  return r.exitCode === 0;
}

/**
 * IPA's delete_configuration: every active array stopped (after the guard says it may go), its members'
 * superblocks cleared, stale superblocks swept off the disks the guard lets be written, the holders'
 * partition tables wiped. Returns what was removed.
 */
export async function deleteRaid(ctx: TaskContext): Promise<{ arrays: string[]; holders: string[] }> {
  const log = ctx.log;
  ctx.state.raidRootVolumes = new Map();
  // IPA assembles whatever it finds first; with an allow-list (a test host) that would reach disks that are
  // not ours, so only a ramdisk without one does it.
  if (!ctx.guard.hasAllowlist) await run('mdadm', ['--assemble', '--scan'], { log, okCodes: [1, 2] }).catch(() => {});
  const removed: string[] = [];
  const holders = new Set<string>();
  for (let pass = 0; pass < 2; pass++) {
    for (const md of await activeArrays()) {
      ctx.signal.throwIfAborted();
      await ctx.guard.assertArrayRemovable(md.path);
      await run('wipefs', ['-af', md.path], { log });
      await run('mdadm', ['--stop', md.path], { log });
      for (const member of md.members) {
        holders.add(`/dev/${await diskOf(member)}`);
        if (await hasSuperblock(ctx, `/dev/${member}`)) {
          await run('mdadm', ['--zero-superblock', `/dev/${member}`], { log });
        }
      }
      removed.push(md.path);
    }
  }
  // Superblocks of arrays that were not running (a member left from an older layout).
  for (const disk of await raidDisks(ctx)) {
    if (!(await ctx.guard.verdict(disk.path)).ok) continue;
    const parts = (await listSys(`${SYS_BLOCK}/${disk.name}`)).filter((p) => p.startsWith(disk.name));
    for (const dev of [...parts.reverse().map((p) => `/dev/${p}`), disk.path]) {
      if (!(await hasSuperblock(ctx, dev))) continue;
      await run('mdadm', ['--zero-superblock', dev], { log }).catch((err) =>
        log.warn({ device: dev, err: errorText(err) }, 'could not clear an md superblock'),
      );
      holders.add(disk.path);
    }
  }
  for (const h of holders) {
    await ctx.guard.assertWritable(h, 'wipe the partition table of');
    await run('wipefs', ['-af', h], { log });
    await rescanPartitions(h, log, [], { onlyExpected: true });
  }
  const left = await activeArrays();
  if (left.length > 0) {
    throw new SoftwareRAIDError(
      `Unable to clean all softraid correctly. Remaining [${left.map((a) => a.path).join(', ')}]`,
    );
  }
  return { arrays: removed, holders: [...holders] };
}
