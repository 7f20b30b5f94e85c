import { rm } from 'node:fs/promises';
import { afterAll, describe, expect, it } from 'vitest';
import { HintError, matchesHints, parseHints, quote } from '../../agent/disk/hints.ts';
import { sysByPath, sysIdentity } from '../../agent/disk/sysfs.ts';
import { buildTree } from '../helpers/sys-tree.ts';

const GiB = 2 ** 30;
const disk = {
  name: '/dev/sda',
  size: 100 * GiB,
  model: 'Samsung SSD 860',
  vendor: 'ATA',
  serial: 'S3Z9NB0K123456',
  wwn: '0x5002538e40a1b2c3',
  wwn_with_extension: '0x5002538e40a1b2c3',
  wwn_vendor_extension: null,
  rotational: false,
  hctl: '1:0:0:0',
  by_path: '/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0',
  tran: 'sata',
};

const match = (hints: Record<string, unknown>, dev: Record<string, unknown> = disk) =>
  matchesHints(dev as Parameters<typeof matchesHints>[0], parseHints(hints));

describe('root device hints', () => {
  it.each([
    [{ size: 100 }, true],
    [{ size: 101 }, false],
    [{ size: '== 100' }, true],
    [{ size: '!= 100' }, false],
    [{ size: '>= 50' }, true],
    [{ size: '>= 150' }, false],
    [{ size: '<= 100' }, true],
    [{ size: '< 100' }, false],
    [{ size: '> 99' }, true],
    [{ size: '= 10' }, true],
    [{ size: '<or> 10 <or> 100' }, true],
    [{ size: '<or> 10 <or> 20' }, false],
    [{ size: '<range-in> [100 200]' }, true],
    [{ size: '<range-in> (100 200]' }, false],
    [{ model: 'samsung ssd 860' }, true],
    [{ model: 's== Samsung SSD 860' }, true],
    [{ model: 's!= Samsung SSD 860' }, false],
    [{ model: '<in> SSD' }, true],
    [{ model: '<in> HDD' }, false],
    [{ model: '<all-in> samsung 860' }, true],
    [{ model: '<all-in> samsung 870' }, false],
    [{ serial: '<or> nope <or> s3z9nb0k123456' }, true],
    [{ serial: 's>= S3' }, true],
    [{ serial: 's< A' }, false],
    [{ vendor: 'ata', rotational: false }, true],
    [{ rotational: 'yes' }, false],
    [{ wwn: '0x5002538E40A1B2C3' }, true],
    [{ wwn_with_extension: '0x5002538e40a1b2c3' }, true],
    [{ wwn_vendor_extension: '0x1' }, false],
    [{ name: '/dev/sda' }, true],
    [{ name: 'sda' }, false],
    [{ hctl: '1:0:0:0' }, true],
    [{ by_path: '/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0' }, true],
    [{ tran: 'sata', size: '>= 100', model: '<in> samsung' }, true],
    [{ tran: 'sata', size: '>= 200' }, false],
  ])('%j matches: %s', (hints, expected) => {
    expect(match(hints)).toBe(expected);
  });

  it('a device with no value for a string hint never matches', () => {
    expect(match({ serial: '<in> s' }, { ...disk, serial: null })).toBe(false);
    expect(match({ serial: 's!= x' }, { ...disk, serial: '' })).toBe(false);
  });

  it.each([
    [{ colour: 'red' }, /hints "colour" are invalid/],
    [{ size: 'big' }, /not an integer/],
    [{ size: 0 }, /positive integer/],
    [{ size: 's== 10' }, /does not compare numbers/],
    [{ model: 12 }, /not a string/],
    [{ model: '>= 3' }, /is a string/],
    [{ rotational: 'maybe' }, /not a Boolean/],
    [{ size: '<range-in> 1 2' }, /invalid range/],
    [{ model: '   ' }, /empty/],
  ])('%j is rejected', (hints, message) => {
    expect(() => parseHints(hints)).toThrow(HintError);
    expect(() => parseHints(hints)).toThrow(message);
  });

  it('quotes like Python quote(): spaces and colons escaped, slashes kept', () => {
    expect(quote('a b/c:d')).toBe('a%20b/c%3Ad');
  });
});

describe('a device value given as several (IPA matches a disk by the lsblk or the udev WWN)', () => {
  it('matches when any of them matches, and not when none does', () => {
    const dev = { wwn: ['0x6d0946606b4d4d0012345678abcdef01', '0x6d0946606b4d4d00'] };
    expect(matchesHints(dev, parseHints({ wwn: '0x6d0946606b4d4d00' }))).toBe(true);
    expect(matchesHints(dev, parseHints({ wwn: '0x6d0946606b4d4d0012345678abcdef01' }))).toBe(true);
    expect(matchesHints(dev, parseHints({ wwn: '0x6d0946606b4d4d01' }))).toBe(false);
    expect(matchesHints({ wwn: [null] }, parseHints({ wwn: '0x1' }))).toBe(false);
  });
});

describe("sysByPath: udev path_id's names, from sysfs", () => {
  const trees: string[] = [];
  afterAll(async () => {
    for (const t of trees) await rm(t, { recursive: true, force: true });
  });
  const pciAta = 'devices/pci0000:00/0000:00:1f.2/ata3';
  const nvmeNs = 'devices/pci0000:00/0000:01:00.0/nvme/nvme0';

  it('ATA: the port_no of the ata port and the target (the port behind a multiplier), not the kernel ataN', async () => {
    const root = await buildTree({
      [`${pciAta}/ata_port/ata3/port_no`]: '1\n',
      [`${pciAta}/host2/target2:0:0/2:0:0:0/scsi_device/2:0:0:0/dev`]: '',
      [`${pciAta}/host2/target2:0:0/2:0:0:0/block/sda/size`]: '0\n',
      'block/sda': { link: `../${pciAta}/host2/target2:0:0/2:0:0:0/block/sda` },
      [`${pciAta}/host2/target2:0:0/2:0:0:0/block/sda/device`]: { link: '../..' },
      [`${pciAta}/host2/target2:3:0/2:3:0:0/scsi_device/2:3:0:0/dev`]: '',
      [`${pciAta}/host2/target2:3:0/2:3:0:0/block/sdb/size`]: '0\n',
      'block/sdb': { link: `../${pciAta}/host2/target2:3:0/2:3:0:0/block/sdb` },
      [`${pciAta}/host2/target2:3:0/2:3:0:0/block/sdb/device`]: { link: '../..' },
    });
    trees.push(root);
    expect(await sysByPath('sda', `${root}/block`)).toBe('/dev/disk/by-path/pci-0000:00:1f.2-ata-1.0');
    expect(await sysByPath('sdb', `${root}/block`)).toBe('/dev/disk/by-path/pci-0000:00:1f.2-ata-1.3.0');
  });

  it("NVMe: the namespace's nsid, whatever the kernel numbered its block device", async () => {
    const root = await buildTree({
      [`${nvmeNs}/nvme0n1/nsid`]: '2\n',
      [`${nvmeNs}/nvme0n2/nsid`]: '3\n',
      'block/nvme0n1': { link: `../${nvmeNs}/nvme0n1` },
      'block/nvme0n2': { link: `../${nvmeNs}/nvme0n2` },
    });
    trees.push(root);
    expect(await sysByPath('nvme0n1', `${root}/block`)).toBe('/dev/disk/by-path/pci-0000:01:00.0-nvme-2');
    expect(await sysByPath('nvme0n2', `${root}/block`)).toBe('/dev/disk/by-path/pci-0000:01:00.0-nvme-3');
  });
});

describe('sysIdentity: serial and WWN without udev, as lsblk shows them with it', () => {
  const vpd80 = (serial: string) => {
    const text = Buffer.from(serial, 'latin1');
    return Buffer.concat([Buffer.from([0, 0x80, 0, text.length]), text]);
  };

  it("a SAS RAID volume: the unit serial from VPD page 0x80, the whole 32-digit NAA as wwn (lsblk's ID_WWN_WITH_EXTENSION)", async () => {
    const root = await buildTree({
      'block/sdb/device/vpd_pg80': vpd80('  3CX0K5LT0000M1234567  '),
      'block/sdb/device/wwid': 'naa.6d0946606b4d4d0012345678abcdef01\n',
    });
    try {
      expect(await sysIdentity('sdb', `${root}/block`)).toEqual({
        serial: '3CX0K5LT0000M1234567',
        wwn: '0x6d0946606b4d4d0012345678abcdef01',
        wwnWithExtension: '0x6d0946606b4d4d0012345678abcdef01',
        wwnVendorExtension: '0x12345678abcdef01',
      });
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });

  it('a SATA disk: libata answers page 0x80 with the ATA serial; a page that is not 0x80 or not text gives none', async () => {
    const root = await buildTree({
      'block/sda/device/vpd_pg80': vpd80('S3Z9NB0K123456      '),
      'block/sda/device/wwid': 'naa.5002538e40a1b2c3\n',
      'block/sdc/device/vpd_pg80': Buffer.from([0, 0x83, 0, 4, 0x41, 0x42, 0x43, 0x44]),
      'block/sdd/device/vpd_pg80': Buffer.from([0, 0x80, 0, 3, 0x41, 0x07, 0x42]),
    });
    try {
      expect(await sysIdentity('sda', `${root}/block`)).toEqual({
        serial: 'S3Z9NB0K123456',
        wwn: '0x5002538e40a1b2c3',
        wwnWithExtension: '0x5002538e40a1b2c3',
        wwnVendorExtension: null,
      });
      expect((await sysIdentity('sdc', `${root}/block`)).serial).toBeNull();
      expect((await sysIdentity('sdd', `${root}/block`)).serial).toBeNull();
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
