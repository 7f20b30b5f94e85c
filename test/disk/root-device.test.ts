// The root device choice over a disk list read from lsblk JSON and a sysfs tree built for it (this host's kernel
// has no md): what the software RAID steps remembered of is_root_volume, as IPA applies it. A volume built with
// true is the root device whatever the hints say; one built with false is never chosen, nor its holder disks and
// member partitions; with nothing remembered the choice is the usual one. The choice over real disks, hints and
// the device guard is root-device.device.test.ts.
import { rm } from 'node:fs/promises';
import pino from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { blockDevicesFrom, type BlockDevice } from '../../agent/disk/block-devices.ts';
import { chooseAmong, raidRootRule, type Candidate } from '../../agent/disk/root-device.ts';
import { DeviceNotFound } from '../../agent/errors.ts';
import { LogRing } from '../../agent/log.ts';
import { AgentState } from '../../agent/state.ts';
import { buildTree } from '../helpers/sys-tree.ts';
import { lsblkRow } from '../helpers/lsblk-rows.ts';

const GiB = 2 ** 30;
const MiB = 2 ** 20;
let sysBlock: string;
let root: string;
let devices: BlockDevice[];

beforeAll(async () => {
  // vda and vdb hold md0 (RAID-1, partitions 1) and md1 (RAID-0, partitions 2); vdc is a plain disk.
  root = await buildTree({
    'block/vda/vda1/partition': '1',
    'block/vda/vda2/partition': '2',
    'block/vdb/vdb1/partition': '1',
    'block/vdb/vdb2/partition': '2',
    'block/vdc/size': String((8 * GiB) / 512),
    'block/md0/slaves/vda1': { link: '../../vda/vda1' },
    'block/md0/slaves/vdb1': { link: '../../vdb/vdb1' },
    'block/md1/slaves/vda2': { link: '../../vda/vda2' },
    'block/md1/slaves/vdb2': { link: '../../vdb/vdb2' },
  });
  sysBlock = `${root}/block`;
  const lsblk = JSON.stringify({
    blockdevices: [
      lsblkRow('vda', 'disk', 10 * GiB),
      lsblkRow('vdb', 'disk', 10 * GiB),
      lsblkRow('vdc', 'disk', 8 * GiB),
      lsblkRow('md0', 'raid1', 5 * GiB - 8 * MiB),
      lsblkRow('md1', 'raid0', 9 * GiB),
    ],
  });
  devices = await blockDevicesFrom(lsblk, new Set(), sysBlock);
});

afterAll(async () => {
  if (root) await rm(root, { recursive: true, force: true });
});

/** An agent state that remembers `volumes` from a build, and a log to read back. */
function agent(volumes: Record<string, boolean> = {}, node?: Record<string, unknown>) {
  const ring = new LogRing();
  const state = new AgentState('test', null);
  state.raidRootVolumes = new Map(Object.entries(volumes));
  if (node)
    state.update({ node: { uuid: 'n1', properties: {}, instance_info: {}, driver_internal_info: {}, ...node } });
  const log = pino({ base: null }, ring);
  const warnings = () =>
    ring
      .tail()
      .map((l) => JSON.parse(l) as { level: number; msg: string; hints?: unknown })
      .filter((l) => l.level === 40);
  return { services: { state, log }, warnings };
}

/** Every listed device as usable, except those `refused` names (path -> why). */
const usable = (refused: Record<string, string> = {}): Candidate[] =>
  devices.map((device) => ({ device, refused: refused[device.path] ?? null }));

const choose = (
  volumes: Record<string, boolean>,
  hints?: Record<string, unknown>,
  found: Candidate[] = usable(),
): Promise<string> => chooseAmong(agent(volumes).services, found, hints, sysBlock).then((d) => d.path);

const refusal = async (p: Promise<unknown>): Promise<string> => {
  const err = await p.catch((e: unknown) => e);
  expect(err).toBeInstanceOf(DeviceNotFound);
  return (err as Error).message;
};

describe('the software RAID root volume in the root device choice', () => {
  it('with nothing remembered chooses as before: the smallest of at least 4 GiB, or the hinted device', async () => {
    expect(await choose({})).toBe('/dev/md0');
    expect(await choose({}, { name: '/dev/vdc' })).toBe('/dev/vdc');
    expect(await choose({}, { size: 9 })).toBe('/dev/md1');
  });

  it('a volume built with is_root_volume true wins over the root device hints, with a warning', async () => {
    const { services, warnings } = agent({ '/dev/md1': true });
    const chosen = await chooseAmong(services, usable(), { name: '/dev/vdc' }, sysBlock);
    expect(chosen.path).toBe('/dev/md1');
    expect(warnings()).toEqual([
      expect.objectContaining({
        msg: expect.stringContaining('hints are overridden'),
        hints: { name: '/dev/vdc' },
      }),
    ]);
    // The node's own hints are overridden as well; hints that would match nothing do not matter.
    const fromNode = agent({ '/dev/md1': true }, { properties: { root_device: { model: 'none such' } } });
    expect((await chooseAmong(fromNode.services, usable(), undefined, sysBlock)).path).toBe('/dev/md1');
    expect(fromNode.warnings()).toHaveLength(1);
  });

  it('without hints, the true volume wins over a smaller disk, and nothing is warned about', async () => {
    const { services, warnings } = agent({ '/dev/md0': false, '/dev/md1': true });
    expect((await chooseAmong(services, usable(), undefined, sysBlock)).path).toBe('/dev/md1');
    expect(warnings()).toEqual([]);
  });

  it('a volume built with is_root_volume false is left out with its holder disks', async () => {
    // md0 and both holders go: the smallest left of at least 4 GiB is vdc, and md1 may still be hinted.
    expect(await choose({ '/dev/md0': false })).toBe('/dev/vdc');
    expect(await choose({ '/dev/md0': false }, { size: 9 })).toBe('/dev/md1');
    const why = await refusal(
      chooseAmong(agent({ '/dev/md0': false }).services, usable(), { name: '/dev/vda' }, sysBlock),
    );
    expect(why).toContain('/dev/vda (10.00 GiB): left out, /dev/md0 was built with is_root_volume false');
    expect(why).toContain('/dev/md0 (4.99 GiB): left out, /dev/md0 was built with is_root_volume false');
    expect(why).toMatch(/\/dev\/vdc \(8\.00 GiB\)(;|$)/);
  });

  it('BMO with root device hints: every volume false, so only plain disks are left', async () => {
    const all = { '/dev/md0': false, '/dev/md1': false };
    expect(await choose(all)).toBe('/dev/vdc');
    expect(await choose(all, { name: '/dev/vdc' })).toBe('/dev/vdc');
    await refusal(chooseAmong(agent(all).services, usable(), { size: '>= 9' }, sysBlock));
  });

  it('leaves out the member partitions too, and names what it left out and why', async () => {
    const rule = await raidRootRule(new Map([['/dev/md1', false]]), sysBlock);
    expect(rule.root).toBeNull();
    expect([...rule.excluded.keys()].sort()).toEqual(['/dev/md1', '/dev/vda', '/dev/vda2', '/dev/vdb', '/dev/vdb2']);
    // A partition among the candidates (the list holds whole disks, but the rule does not rely on it).
    const part = { ...devices.find((d) => d.name === 'vdc')!, name: 'vda2', path: '/dev/vda2' };
    const found = [...usable(), { device: part, refused: null }];
    expect(await choose({ '/dev/md1': false }, { name: '/dev/vda2' }, found).catch((e: Error) => e.message)).toMatch(
      /\/dev\/vda2 \(8\.00 GiB\): left out, \/dev\/md1 was built with is_root_volume false/,
    );
    expect(await choose({}, { name: '/dev/vda2' }, found)).toBe('/dev/vda2');
  });

  it('an array stopped since it was built leaves out only its own name', async () => {
    const rule = await raidRootRule(new Map([['/dev/md7', false]]), sysBlock);
    expect([...rule.excluded.keys()]).toEqual(['/dev/md7']);
  });

  it('refuses, rather than choosing another disk, a true volume that may not be written or is gone', async () => {
    const guarded = usable({ '/dev/md1': 'protected, it is mounted at /mnt' });
    expect(await refusal(chooseAmong(agent({ '/dev/md1': true }).services, guarded, undefined, sysBlock))).toContain(
      'the software RAID volume /dev/md1, built with is_root_volume true, cannot be used (protected, it is mounted at /mnt)',
    );
    expect(await refusal(chooseAmong(agent({ '/dev/md4': true }).services, usable(), undefined, sysBlock))).toContain(
      'the software RAID volume /dev/md4, built with is_root_volume true, is not listed',
    );
  });
});
