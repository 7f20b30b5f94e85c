// target_raid_config validation and the holders' layout, as pure functions: every refusal IPA makes (and the
// ones the agent adds: sizes, too few disks, a layout that does not fit), and the layout IPA builds.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { blockDevicesFrom, ipaView, mergeLsblk } from '../../agent/disk/block-devices.ts';
import { SoftwareRAIDError } from '../../agent/errors.ts';
import { validateRaidConfig, wantsSoftwareRaid, type LogicalDisk } from '../../agent/disk/raid-config.ts';
import {
  bootModeOf,
  capabilitiesOf,
  firstRaidStart,
  orderLogicalDisks,
  partitionTableType,
  planRaid,
  rootVolumesOf,
  type Holder,
} from '../../agent/disk/raid-layout.ts';
import { lsblkRow } from '../helpers/lsblk-rows.ts';

const GiB = 2 ** 30;
const facts = { nodeUuid: 'n-1', diskCount: 2, skipVolumeNames: [] as string[] };
const sw = (d: Record<string, unknown>) => ({ controller: 'software', ...d });

function refusal(config: unknown, f = facts): string {
  try {
    validateRaidConfig(config, f);
  } catch (err) {
    expect(err).toBeInstanceOf(SoftwareRAIDError);
    expect((err as SoftwareRAIDError).toCommandError()).toMatchObject({
      type: 'SoftwareRAIDError',
      code: 500,
      message: 'Software RAID caused unknown error',
    });
    return (err as Error).message;
  }
  throw new Error(`accepted ${JSON.stringify(config)}`);
}

describe('validateRaidConfig', () => {
  it('accepts IPA example: RAID-1 of 100 GiB named root, then a RAID-0 of the rest', () => {
    const disks = validateRaidConfig(
      {
        logical_disks: [
          sw({ size_gb: 100, raid_level: '1', volume_name: 'root', is_root_volume: true }),
          sw({ size_gb: 'MAX', raid_level: '0' }),
        ],
      },
      facts,
    );
    expect(disks).toEqual([
      { position: 0, level: '1', sizeGb: 100, volumeName: 'root', isRootVolume: true, physicalDisks: null },
      { position: 1, level: '0', sizeGb: 'MAX', volumeName: null, isRootVolume: null, physicalDisks: null },
    ]);
  });

  it('an empty config builds nothing; a config without logical disks is refused', () => {
    expect(validateRaidConfig({}, facts)).toBeNull();
    expect(validateRaidConfig(null, facts)).toBeNull();
    expect(refusal({ logical_disks: [] })).toBe('RAID config contains no logical disks');
    expect(refusal({ logical_disks: 'x' })).toMatch(/logical_disks must be a list/);
    expect(refusal({ logical_disks: [7] })).toMatch(/logical disk 0 is not an object: 7/);
  });

  it('only controller software asks for RAID; a mix of controllers is refused', () => {
    expect(wantsSoftwareRaid({ logical_disks: [{ controller: 'RAID.Integrated.1-1', raid_level: '1' }] })).toBe(false);
    expect(wantsSoftwareRaid({ logical_disks: [sw({ raid_level: '1' })] })).toBe(true);
    const msg = refusal({
      logical_disks: [sw({ size_gb: 10, raid_level: '1' }), { controller: 'hw', size_gb: 'MAX', raid_level: '0' }],
    });
    expect(msg).toBe(
      "Could not validate Software RAID config for n-1: Software RAID configuration requires all logical disks to have 'controller'='software'",
    );
  });

  it('refuses more than two logical disks', () => {
    const d = sw({ size_gb: 10, raid_level: '1' });
    expect(refusal({ logical_disks: [d, d, d] })).toMatch(/requires one or two logical disks/);
  });

  it.each([
    ['0', 'requires RAID-1 for the first logical disk'],
    ['5', 'requires RAID-1 for the first logical disk'],
    ['1+0', 'requires RAID-1 for the first logical disk'],
  ])('refuses RAID-%s as the first logical disk', (level, why) => {
    expect(refusal({ logical_disks: [sw({ size_gb: 10, raid_level: level })] })).toContain(why);
  });

  it.each(['2', 'JBOD', '5+0', '6+0', '10'])('refuses RAID level %s as the second logical disk', (level) => {
    expect(
      refusal({ logical_disks: [sw({ size_gb: 10, raid_level: '1' }), sw({ size_gb: 'MAX', raid_level: level })] }),
    ).toContain(`Software RAID configuration does not support RAID level ${level}`);
  });

  it.each(['0', '1', '1+0'])('accepts RAID level %s as the second logical disk', (level) => {
    expect(
      validateRaidConfig(
        { logical_disks: [sw({ size_gb: 10, raid_level: '1' }), sw({ size_gb: 'MAX', raid_level: level })] },
        facts,
      ),
    ).toHaveLength(2);
  });

  it('refuses MAX twice, and sizes that are no whole number of GiB above 0', () => {
    expect(
      refusal({ logical_disks: [sw({ size_gb: 'MAX', raid_level: '1' }), sw({ size_gb: 'MAX', raid_level: '0' })] }),
    ).toContain("Software RAID can have only one RAID device with size 'MAX'");
    for (const size of [0, -1, 1.5, '10', 'max', null, undefined]) {
      expect(refusal({ logical_disks: [sw({ size_gb: size, raid_level: '1' })] })).toContain(
        `The size_gb of logical disk 0 must be a whole number of GiB above 0 or "MAX", got ${JSON.stringify(size)}`,
      );
    }
  });

  it('a MAX first disk is accepted and moved last, so the fixed-size one is md0', () => {
    const disks = validateRaidConfig(
      { logical_disks: [sw({ size_gb: 'MAX', raid_level: '1' }), sw({ size_gb: 5, raid_level: '0' })] },
      facts,
    )!;
    expect(orderLogicalDisks(disks).map((d) => d.position)).toEqual([1, 0]);
  });

  it('refuses too few disks: RAID-5 on 2, RAID-6 on 3, RAID-1 on one disk, physical_disks of one', () => {
    const two = (level: string) => ({
      logical_disks: [sw({ size_gb: 10, raid_level: '1' }), sw({ size_gb: 'MAX', raid_level: level })],
    });
    expect(refusal(two('5'))).toContain(
      'Software RAID configuration is not possible for RAID level 5 with only 2 block devices found.',
    );
    expect(refusal(two('6'), { ...facts, diskCount: 3 })).toContain('RAID level 6 with only 3 block devices');
    expect(validateRaidConfig(two('6'), { ...facts, diskCount: 4 })).toHaveLength(2);
    expect(refusal({ logical_disks: [sw({ size_gb: 10, raid_level: '1' })] }, { ...facts, diskCount: 1 })).toContain(
      'RAID level 1 with only 1 block devices found.',
    );
    expect(
      refusal({ logical_disks: [sw({ size_gb: 10, raid_level: '1', physical_disks: [{ name: '/dev/vda' }] })] }),
    ).toContain('must be a list with at least 2 items');
    expect(
      refusal({ logical_disks: [sw({ size_gb: 10, raid_level: '1', physical_disks: ['/dev/vda', '/dev/vdb'] })] }),
    ).toContain('must be a list of device hints (dictionaries)');
  });

  it('volume names: unique, mdadm-safe, and required on every disk when the skip list names one', () => {
    const named = (a: unknown, b: unknown) => ({
      logical_disks: [
        sw({ size_gb: 10, raid_level: '1', volume_name: a }),
        sw({ size_gb: 'MAX', raid_level: '0', volume_name: b }),
      ],
    });
    expect(refusal(named('root', 'root'))).toContain('Duplicate software RAID device name root detected');
    expect(refusal(named('root', 'a/b'))).toContain('The volume_name of logical disk 1 must be 1 to 32 letters');
    expect(refusal(named('root', undefined), { ...facts, skipVolumeNames: ['root'] })).toContain(
      'All logical disks are required to have a volume name',
    );
    expect(validateRaidConfig(named('root', 'data'), { ...facts, skipVolumeNames: ['root'] })).toHaveLength(2);
  });

  it('at most one is_root_volume', () => {
    expect(
      refusal({
        logical_disks: [
          sw({ size_gb: 10, raid_level: '1', is_root_volume: true }),
          sw({ size_gb: 'MAX', raid_level: '1', is_root_volume: true }),
        ],
      }),
    ).toContain('allows only one logical disk to be marked as is_root_volume');
  });

  it('reports every problem at once, joined by "; "', () => {
    const msg = refusal({
      logical_disks: [sw({ size_gb: 'MAX', raid_level: '0' }), { controller: 'hw', size_gb: 'MAX', raid_level: '2' }],
    });
    expect(msg.split('; ')).toHaveLength(4);
  });
});

describe('boot mode and partition table', () => {
  it('reads capabilities as a string or an object', () => {
    expect(capabilitiesOf('boot_mode:uefi,disk_label:gpt')).toEqual({ boot_mode: 'uefi', disk_label: 'gpt' });
    expect(capabilitiesOf({ boot_mode: 'bios' })).toEqual({ boot_mode: 'bios' });
    expect(capabilitiesOf(undefined)).toEqual({});
  });

  it('follows IPA: secure boot, instance_info, the capability, driver_internal_info, then the ramdisk', () => {
    expect(bootModeOf({ properties: { capabilities: 'secure_boot:true,boot_mode:bios' } }, 'bios')).toBe('uefi');
    expect(
      bootModeOf(
        { instance_info: { deploy_boot_mode: 'bios' }, properties: { capabilities: 'boot_mode:uefi' } },
        'uefi',
      ),
    ).toBe('bios');
    expect(bootModeOf({ properties: { capabilities: { boot_mode: 'uefi' } } }, 'bios')).toBe('uefi');
    expect(bootModeOf({ driver_internal_info: { deploy_boot_mode: 'uefi' } }, 'bios')).toBe('uefi');
    expect(bootModeOf({}, 'bios')).toBe('bios');
  });

  it('GPT in UEFI; in BIOS, GPT only when disk_label says so', () => {
    expect(partitionTableType({}, 'uefi')).toBe('gpt');
    expect(partitionTableType({}, 'bios')).toBe('msdos');
    expect(partitionTableType({ properties: { capabilities: 'disk_label:gpt' } }, 'bios')).toBe('gpt');
    expect(
      partitionTableType(
        { instance_info: { capabilities: { disk_label: 'msdos' } }, properties: { capabilities: 'disk_label:gpt' } },
        'bios',
      ),
    ).toBe('msdos');
  });

  it('keeps room for the ESP in UEFI (551 MiB), the BIOS boot partition on GPT (8 MiB), none on msdos', () => {
    expect(firstRaidStart('uefi', 'gpt', null)).toBe('551MiB');
    expect(firstRaidStart('bios', 'gpt', null)).toBe('8MiB');
    expect(firstRaidStart('bios', 'msdos', 2048)).toBe('2048s');
    expect(() => firstRaidStart('bios', 'msdos', null)).toThrow(SoftwareRAIDError);
  });
});

describe('planRaid', () => {
  const holder = (name: string, gib = 20): Holder => ({
    path: `/dev/${name}`,
    name,
    size: gib * GiB,
    logicalSectorSize: 512,
  });
  const ld = (
    position: number,
    level: string,
    sizeGb: number | 'MAX',
    volumeName: string | null = null,
  ): LogicalDisk => ({
    position,
    level,
    sizeGb,
    volumeName,
    isRootVolume: null,
    physicalDisks: null,
  });

  it('UEFI RAID-1 + RAID-0 MAX: same partitions on each holder, md0/md1 with metadata 1', () => {
    const vda = holder('vda');
    const vdb = holder('vdb');
    const plan = planRaid(
      [ld(0, '1', 10, 'root'), ld(1, '0', 'MAX')],
      [
        [vda, vdb],
        [vda, vdb],
      ],
      'uefi',
      'gpt',
      '551MiB',
    );
    expect(plan.holders.map((h) => h.path)).toEqual(['/dev/vda', '/dev/vdb']);
    expect(plan.partitions.get('/dev/vda')).toEqual([
      { holder: '/dev/vda', number: 1, device: '/dev/vda1', start: '551MiB', end: '10GiB' },
      { holder: '/dev/vda', number: 2, device: '/dev/vda2', start: '10GiB', end: '-1' },
    ]);
    expect(plan.arrays.map((a) => a.mdadmArgs)).toEqual([
      [
        '--create',
        '/dev/md0',
        '--force',
        '--run',
        '--metadata=1',
        '--level',
        '1',
        '--name',
        'root',
        '--raid-devices',
        '2',
        '/dev/vda1',
        '/dev/vdb1',
      ],
      [
        '--create',
        '/dev/md1',
        '--force',
        '--run',
        '--metadata=1',
        '--level',
        '0',
        '--name',
        'md1',
        '--raid-devices',
        '2',
        '/dev/vda2',
        '/dev/vdb2',
      ],
    ]);
  });

  it('MAX first is moved last; 1+0 is mdadm level 10; NVMe members are named with p', () => {
    const a = holder('nvme0n1');
    const b = holder('nvme1n1');
    const plan = planRaid(
      [ld(0, '1', 'MAX'), ld(1, '1+0', 4)],
      [
        [a, b],
        [a, b],
      ],
      'bios',
      'gpt',
      '8MiB',
    );
    expect(plan.arrays.map((x) => [x.device, x.level, x.logicalDisk.position])).toEqual([
      ['/dev/md0', '1+0', 1],
      ['/dev/md1', '1', 0],
    ]);
    expect(plan.arrays[0]!.mdadmArgs.slice(5, 7)).toEqual(['--level', '10']);
    expect(plan.arrays[0]!.members.map((m) => [m.device, m.start, m.end])).toEqual([
      ['/dev/nvme0n1p1', '8MiB', '4GiB'],
      ['/dev/nvme1n1p1', '8MiB', '4GiB'],
    ]);
    expect(plan.arrays[1]!.members.map((m) => [m.device, m.start, m.end])).toEqual([
      ['/dev/nvme0n1p2', '4GiB', '-1'],
      ['/dev/nvme1n1p2', '4GiB', '-1'],
    ]);
  });

  it('numbers partitions per holder when the logical disks use different holders', () => {
    const [a, b, c] = [holder('sda'), holder('sdb'), holder('sdc')];
    const plan = planRaid(
      [ld(0, '1', 5), ld(1, '1', 'MAX')],
      [
        [a, b],
        [b, c],
      ],
      'bios',
      'msdos',
      '2048s',
    );
    expect(plan.arrays[1]!.members.map((m) => m.device)).toEqual(['/dev/sdb2', '/dev/sdc1']);
  });

  it('remembers is_root_volume by the array built for each logical disk, MAX moved last included', () => {
    const [a, b] = [holder('vda'), holder('vdb')];
    const plan = (first: boolean | null, second: boolean | null) =>
      planRaid(
        [
          { ...ld(0, '1', 'MAX'), isRootVolume: first },
          { ...ld(1, '0', 4), isRootVolume: second },
        ],
        [
          [a, b],
          [a, b],
        ],
        'uefi',
        'gpt',
        '551MiB',
      );
    expect(rootVolumesOf(plan(true, false))).toEqual(
      new Map([
        ['/dev/md0', false],
        ['/dev/md1', true],
      ]),
    );
    // Unset is not false: such an array stays a candidate like any disk.
    expect(rootVolumesOf(plan(null, false))).toEqual(new Map([['/dev/md0', false]]));
    expect(rootVolumesOf(plan(null, null)).size).toBe(0);
  });

  it('refuses a layout that does not fit a holder, naming it', () => {
    expect(() => planRaid([ld(0, '1', 30)], [[holder('vda'), holder('vdb', 10)]], 'uefi', 'gpt', '551MiB')).toThrow(
      /Logical disk 0 \(RAID-1, 30 GiB\) does not fit on \/dev\/vda: its partition would span 551MiB to 30GiB of a 20.00 GiB disk/,
    );
    expect(() => planRaid([ld(0, '1', 10)], [[holder('vda', 20), holder('vdb', 10)]], 'uefi', 'gpt', '551MiB')).toThrow(
      /does not fit on \/dev\/vdb/,
    );
    // A fixed size exactly to the end of the disk leaves no room for GPT's backup table.
    expect(() => planRaid([ld(0, '1', 20)], [[holder('vda'), holder('vdb')]], 'bios', 'gpt', '8MiB')).toThrow(
      SoftwareRAIDError,
    );
    expect(() =>
      planRaid(
        [ld(0, '1', 20), ld(1, '0', 'MAX')],
        [
          [holder('vda', 21), holder('vdb', 21)],
          [holder('vda', 21), holder('vdb', 21)],
        ],
        'bios',
        'msdos',
        '2048s',
      ),
    ).not.toThrow();
  });
});

describe('md arrays in the disk list', () => {
  it('lsblk -d leaves arrays out; named, they are merged in and listed as disks IPA would see (TYPE raid*)', async () => {
    const disks = JSON.stringify({
      blockdevices: [lsblkRow('vda', 'disk', 3 * GiB), lsblkRow('vdb', 'disk', 3 * GiB)],
    });
    const arrays = JSON.stringify({
      blockdevices: [lsblkRow('md0', 'raid1', GiB - 2 * 2 ** 20), lsblkRow('md1', 'raid0', 4 * GiB)],
    });
    const merged = mergeLsblk(disks, arrays);
    const sys = await mkdtemp(join(tmpdir(), 'ina-sys-'));
    try {
      const list = await blockDevicesFrom(merged, new Set(), sys);
      expect(list.map((d) => [d.path, d.type])).toEqual([
        ['/dev/vda', 'disk'],
        ['/dev/vdb', 'disk'],
        ['/dev/md0', 'raid1'],
        ['/dev/md1', 'raid0'],
      ]);
      expect(ipaView(list[2]!)).toMatchObject({ name: '/dev/md0', size: GiB - 2 * 2 ** 20, serial: null, wwn: null });
    } finally {
      await rm(sys, { recursive: true, force: true });
    }
    expect(() => mergeLsblk(disks, 'not json')).toThrow(/not JSON/);
  });
});
