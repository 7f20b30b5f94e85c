// Multipath LUNs in the disk list, for root device hints and in the guard's path check, on sysfs trees laid out
// as the kernel shows a SAN LUN over two SCSI paths assembled by dm-multipath (the layout the QEMU e2e boots:
// test/e2e/multipath.test.ts), next to an LVM volume and a virtio disk that are not multipath.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { blockDevicesFrom } from '../../agent/disk/block-devices.ts';
import {
  identitySource,
  multipathMaps,
  pathHintNote,
  pathOfMapReason,
  withoutPaths,
} from '../../agent/host/multipath.ts';

const WWID = '35000c50015ea71ac';
let root: string;
let block: string;

async function put(rel: string, content: string | Buffer): Promise<void> {
  const path = join(block, rel);
  await mkdir(join(path, '..'), { recursive: true });
  await writeFile(path, content);
}

/** VPD page 0x80 as the kernel exposes it: a 4-byte header, then the serial. */
function vpd80(serial: string): Buffer {
  const header = Buffer.from([0, 0x80, 0, serial.length]);
  return Buffer.concat([header, Buffer.from(serial, 'latin1')]);
}

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'ina-mpath-'));
  block = join(root, 'block');
  for (const [path, hctl] of [
    ['sda', '2:0:0:0'],
    ['sdb', '2:0:1:0'],
  ] as const) {
    await put(`${path}/device/model`, 'QEMU HARDDISK\n');
    await put(`${path}/device/vendor`, 'QEMU    \n');
    await put(`${path}/device/wwid`, 'naa.5000c50015ea71ac\n');
    await put(`${path}/device/vpd_pg80`, vpd80('SANLUN0'));
    await mkdir(join(block, path, 'device/scsi_device', hctl), { recursive: true });
  }
  await put('sda/sda1/partition', '1\n');
  await put('dm-0/dm/uuid', `mpath-${WWID}\n`);
  await put('dm-0/dm/name', `${WWID}\n`);
  await put('dm-0/slaves/sdb', '');
  await put('dm-0/slaves/sda', '');
  await put('dm-0/size', `${(5 * 2 ** 30) / 512}\n`);
  await put('dm-0/ro', '0\n');
  await put('dm-0/queue/rotational', '1\n');
  await put('dm-0/queue/logical_block_size', '512\n');
  await put('dm-0/queue/physical_block_size', '4096\n');
  // A partition map kpartx would add on top, and an LVM volume: neither is a LUN.
  await put('dm-1/dm/uuid', `part1-mpath-${WWID}\n`);
  await put('dm-1/slaves/dm-0', '');
  await put('dm-2/dm/uuid', 'LVM-Kx2b3\n');
  await put('dm-2/slaves/vda', '');
  await put('vda/serial', 'E2EDISK0\n');
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

const row = (kname: string, type: string, path = `/dev/${kname}`) => ({
  kname,
  path,
  size: 64 * 2 ** 20,
  model: null,
  vendor: null,
  serial: null,
  wwn: null,
  rota: '1',
  hctl: null,
  'log-sec': 512,
  'phy-sec': 512,
  type,
  tran: null,
  ro: '0',
});

describe('multipath maps from sysfs', () => {
  it('finds the map of the LUN with its paths, and not partition or LVM maps', async () => {
    expect(await multipathMaps(block)).toEqual([{ name: 'dm-0', wwid: WWID, alias: WWID, paths: ['sda', 'sdb'] }]);
  });

  it('has no maps where there is no device-mapper', async () => {
    expect(await multipathMaps(join(root, 'nonexistent'))).toEqual([]);
  });

  it('leaves the paths out of a disk list and takes the identity from a path', async () => {
    const maps = await multipathMaps(block);
    const disks = ['vda', 'sda', 'sdb', 'dm-0'].map((name) => ({ name }));
    expect(withoutPaths(disks, maps).map((d) => d.name)).toEqual(['vda', 'dm-0']);
    expect(identitySource('dm-0', maps)).toBe('sda');
    expect(identitySource('vda', maps)).toBe('vda');
  });
});

describe('the disk list with a multipath LUN', () => {
  it('shows one disk for the LUN: the map as /dev/dm-N, with the serial, WWN, model and vendor of its LUN', async () => {
    const lsblk = JSON.stringify({
      blockdevices: [
        row('vda', 'disk'),
        row('sda', 'disk'),
        row('sdb', 'disk'),
        row('dm-0', 'mpath', `/dev/mapper/${WWID}`),
        row('dm-2', 'lvm'),
      ],
    });
    const devices = await blockDevicesFrom(lsblk, new Set(), block);
    expect(devices.map((d) => d.name)).toEqual(['vda', 'dm-0']);
    const map = devices[1]!;
    expect(map).toMatchObject({
      path: '/dev/dm-0',
      type: 'mpath',
      serial: 'SANLUN0',
      wwn: '0x5000c50015ea71ac',
      model: 'QEMU HARDDISK',
      vendor: 'QEMU',
      hctl: null,
    });
    expect(devices[0]!.serial).toBe('E2EDISK0');
  });

  it('lists the map from sysfs when lsblk -d shows only its paths (the map is their holder)', async () => {
    const lsblk = JSON.stringify({ blockdevices: [row('vda', 'disk'), row('sda', 'disk'), row('sdb', 'disk')] });
    const devices = await blockDevicesFrom(lsblk, new Set(), block);
    expect(devices.map((d) => d.name)).toEqual(['vda', 'dm-0']);
    expect(devices[1]).toMatchObject({
      path: '/dev/dm-0',
      type: 'mpath',
      size: 5 * 2 ** 30,
      serial: 'SANLUN0',
      wwn: '0x5000c50015ea71ac',
      rotational: true,
      logicalSectorSize: 512,
      physicalSectorSize: 4096,
      readOnly: false,
    });
  });

  it('lists paths as disks when no map holds them (multipath did not run)', async () => {
    await rm(join(block, 'dm-0'), { recursive: true });
    const lsblk = JSON.stringify({ blockdevices: [row('sda', 'disk'), row('sdb', 'disk')] });
    expect((await blockDevicesFrom(lsblk, new Set(), block)).map((d) => d.name)).toEqual(['sda', 'sdb']);
  });
});

describe('a path on its own', () => {
  it('is refused naming the map, and so is a partition on a path; other devices are not concerned', async () => {
    const reason = await pathOfMapReason('sdb', block);
    expect(reason).toBe(
      `a path of /dev/dm-0 (multipath map /dev/mapper/${WWID} of LUN ${WWID}, paths sda, sdb); a multipath LUN is ` +
        'written and erased only through its map: name /dev/dm-0 (or its serial or wwn) instead',
    );
    expect(await pathOfMapReason('sda1', block)).toMatch(/^on sda, a path of \/dev\/dm-0 /);
    expect(await pathOfMapReason('vda', block)).toBeNull();
    expect(await pathOfMapReason('dm-0', block)).toBeNull();
  });

  it('named by root device hints (name or hctl) gets a note naming the map; other hints get none', async () => {
    expect(await pathHintNote({ name: '/dev/sda' }, block)).toContain('The hints name /dev/sda, a path of /dev/dm-0');
    expect(await pathHintNote({ name: 'sdb' }, block)).toContain('The hints name /dev/sdb, a path of /dev/dm-0');
    expect(await pathHintNote({ hctl: '2:0:1:0' }, block)).toContain('/dev/sdb, a path of /dev/dm-0');
    expect(await pathHintNote({ name: '/dev/vda' }, block)).toBe('');
    expect(await pathHintNote({ serial: 'SANLUN0' }, block)).toBe('');
    expect(await pathHintNote(undefined, block)).toBe('');
  });
});
