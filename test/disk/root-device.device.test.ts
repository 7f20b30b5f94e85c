// chooseRootDevice over three real loop devices (sparse, so 6 GiB costs nothing): every operator family,
// the no-hints rule, skip lists, the device guard, and DeviceNotFound naming what was seen.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceNotFound } from '../../agent/errors.ts';
import { listBlockDevices } from '../../agent/disk/block-devices.ts';
import { chooseRootDevice } from '../../agent/disk/root-device.ts';
import { diskServices } from '../helpers/configdrive.ts';
import { attachLoop, detachLoop, GiB, type LoopDevice } from '../helpers/loop.ts';

let small: LoopDevice;
let mid: LoopDevice;
let big: LoopDevice;
let paths: string[];

beforeAll(async () => {
  small = await attachLoop(1 * GiB);
  mid = await attachLoop(5 * GiB);
  big = await attachLoop(6 * GiB);
  paths = [small.path, mid.path, big.path];
});

afterAll(async () => {
  for (const d of [small, mid, big]) if (d) await detachLoop(d);
});

const choose = (hints?: Record<string, unknown>, flags: Record<string, string> = {}) =>
  chooseRootDevice(diskServices(paths, flags), hints).then((d) => d.path);

describe('listBlockDevices', () => {
  it('lists exactly the allow-listed loop devices, with sizes and sector sizes', async () => {
    const devs = await listBlockDevices(diskServices(paths));
    const loops = devs.filter((d) => d.type === 'loop');
    expect(loops.map((d) => d.path).sort()).toEqual([...paths].sort());
    const m = loops.find((d) => d.path === mid.path)!;
    expect(m.size).toBe(5 * GiB);
    expect(m.logicalSectorSize).toBe(512);
    expect(m.name).toBe(mid.path.slice('/dev/'.length));
  });

  it('leaves out loop devices that are not allow-listed', async () => {
    const devs = await listBlockDevices(diskServices([mid.path]));
    expect(devs.filter((d) => d.type === 'loop').map((d) => d.path)).toEqual([mid.path]);
  });
});

describe('chooseRootDevice', () => {
  it('without hints picks the smallest disk of at least 4 GiB', async () => {
    expect(await choose()).toBe(mid.path);
  });

  it.each([
    ['size ==', () => ({ size: 6 }), () => big.path],
    ['size >=', () => ({ size: '>= 6' }), () => big.path],
    ['size <', () => ({ size: '< 2' }), () => small.path],
    ['size <range-in>', () => ({ size: '<range-in> [4 5]' }), () => mid.path],
    ['size <or>', () => ({ size: '<or> 1 <or> 7' }), () => small.path],
    // Two disks match; which is listed first depends on the loop numbers the kernel handed out.
    ['size !=', () => ({ size: '!= 1' }), () => [mid.path, big.path]],
    ['size <=', () => ({ size: '<= 1' }), () => small.path],
    ['size >', () => ({ size: '> 5' }), () => big.path],
    ['size = (legacy, at least)', () => ({ size: '= 6' }), () => big.path],
    ['name s>=', () => ({ name: `s>= ${big.path}`, size: 6 }), () => big.path],
    ['name <all-in>', () => ({ name: `<all-in> /dev/ ${mid.path.slice(5)}` }), () => mid.path],
    ['name s==', () => ({ name: big.path }), () => big.path],
    ['name s!=', () => ({ name: `s!= ${small.path}`, size: '> 5' }), () => big.path],
    ['name <in>', () => ({ name: `<in> ${mid.path.slice(5)}` }), () => mid.path],
    ['name <or>', () => ({ name: `<or> /dev/nothing <or> ${mid.path}` }), () => mid.path],
    ['rotational', () => ({ rotational: true, size: 6 }), () => big.path],
  ] as [string, () => Record<string, unknown>, () => string | string[]][])(
    'hint %s',
    async (_label, hints, expected) => {
      expect([expected()].flat()).toContain(await choose(hints()));
    },
  );

  it('reads the node root_device hints when none are passed', async () => {
    const services = diskServices(paths);
    services.state.update({
      node: { uuid: 'n1', properties: { root_device: { size: 6 } }, instance_info: {}, driver_internal_info: {} },
    });
    expect((await chooseRootDevice(services)).path).toBe(big.path);
  });

  it("takes instance_info.root_device before properties', and properties' when instance_info's is empty", async () => {
    const withNode = (instance_info: Record<string, unknown>) => {
      const services = diskServices(paths);
      services.state.update({
        node: { uuid: 'n1', properties: { root_device: { size: 6 } }, instance_info, driver_internal_info: {} },
      });
      return chooseRootDevice(services).then((d) => d.path);
    };
    expect(await withNode({ root_device: { size: 5 } })).toBe(mid.path);
    expect(await withNode({ root_device: {} })).toBe(big.path);
    expect(await withNode({ root_device: null })).toBe(big.path);
  });

  it.each([
    ['root device hints given as a string', () => ({}), () => ({ root_device: big.path }), /hints must be an object/],
    [
      'a skip list of strings',
      () => ({ skip_block_devices: [mid.path] }),
      () => ({}),
      /must be a list of hint objects/,
    ],
    [
      'a skip list that is one object',
      () => ({ skip_block_devices: { name: mid.path } }),
      () => ({}),
      /must be a list/,
    ],
  ] as [string, () => Record<string, unknown>, () => Record<string, unknown>, RegExp][])(
    'refuses %s (DeviceNotFound) instead of choosing a disk',
    async (_what, properties, instanceInfo, why) => {
      const services = diskServices(paths);
      services.state.update({
        node: { uuid: 'n1', properties: properties(), instance_info: instanceInfo(), driver_internal_info: {} },
      });
      const err = await chooseRootDevice(services).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DeviceNotFound);
      expect((err as Error).message).toMatch(why);
    },
  );

  it('honours the node skip_block_devices and the agent skip list', async () => {
    const services = diskServices(paths);
    services.state.update({
      node: {
        uuid: 'n1',
        properties: { skip_block_devices: [{ name: mid.path }, { volume_name: 'r0' }] },
        instance_info: {},
        driver_internal_info: {},
      },
    });
    expect((await chooseRootDevice(services)).path).toBe(big.path);
    expect(await choose(undefined, { 'ipa-skip-block-devices': mid.path })).toBe(big.path);
  });

  it('never picks a device the guard protects (mounted here)', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
    await execa('mkfs.ext4', ['-q', '-F', '-E', 'lazy_itable_init=1,lazy_journal_init=1', mid.path]);
    await execa('mount', [mid.path, dir]);
    try {
      expect(await choose()).toBe(big.path);
      const err = await choose({ size: 5 }).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(DeviceNotFound);
      expect((err as Error).message).toContain(`${mid.path} (5.00 GiB): protected, it is mounted at ${dir}`);
    } finally {
      await execa('umount', [dir]);
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('says which devices it saw when no hint matches', async () => {
    const err = await choose({ model: 'Some SSD' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeviceNotFound);
    for (const p of paths) expect((err as Error).message).toContain(p);
  });

  it('says all disks are too small when none reaches 4 GiB', async () => {
    const err = await chooseRootDevice(diskServices([small.path])).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeviceNotFound);
    expect((err as Error).message).toMatch(/smaller than 4294967296B/);
  });

  it('turns invalid hints into DeviceNotFound saying they failed to validate', async () => {
    const err = await choose({ colour: 'blue' }).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(DeviceNotFound);
    expect((err as Error).message).toMatch(/failed to validate/);
  });
});
