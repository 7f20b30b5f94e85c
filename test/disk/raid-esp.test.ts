// The pure parts of making a software RAID root bootable under UEFI: where each holder's ESP goes, the FAT serial
// it inherits, the per-holder boot entry labels, and which firmware entries are kept or replaced. The disk work
// itself needs md, which this machine's kernel lacks: test/e2e/raid-boot.test.ts runs it in QEMU.
import { describe, expect, it } from 'vitest';
import { entryPlan } from '../../agent/disk/efi-boot.ts';
import { espPlacement, fatVolumeId, holderEspLabel, raidEntryLabel } from '../../agent/disk/raid-esp.ts';

const MiB = 2 ** 20;

describe('espPlacement', () => {
  it('puts the ESP from 1 MiB to 551 MiB, in the room a UEFI layout keeps, under the first free number', () => {
    const raid = [{ number: 1, start: 551 * MiB, size: 1024 * MiB }];
    expect(espPlacement('/dev/vda', raid, 512)).toEqual({ number: 2, firstSector: 2048, lastSector: 1128447 });
    expect(espPlacement('/dev/vda', [...raid, { number: 2, start: 1575 * MiB, size: MiB }], 4096)).toEqual({
      number: 3,
      firstSector: 256,
      lastSector: 141055,
    });
  });

  it('refuses a holder whose RAID partition starts inside that room (a layout made for BIOS boot)', () => {
    expect(() => espPlacement('/dev/vdb', [{ number: 1, start: 8 * MiB, size: 100 * MiB }], 512)).toThrow(
      'No room for the 550 MiB EFI system partition on /dev/vdb between 1 and 551 MiB: partition 1 starts at 8.00 MiB (was the RAID built for BIOS boot?)',
    );
  });
});

describe('names and identities', () => {
  it('gives mkfs.vfat the image ESP serial without its dash, and nothing for a value that is not one', () => {
    expect(fatVolumeId('1234-abcd')).toBe('1234ABCD');
    expect(fatVolumeId(null)).toBeNull();
    expect(fatVolumeId('0b1e4a2c-5d6f-4a8b-9c0d-1e2f3a4b5c6d')).toBeNull();
  });

  it("labels each holder's partition and boot entry by its index, as IPA does", () => {
    expect(holderEspLabel(1)).toBe('uefi-holder-1');
    expect(raidEntryLabel('debian', 0)).toBe('debian (RAID, part0)');
  });
});

describe('entryPlan', () => {
  const path = (uuid: string) => `HD(2,GPT,${uuid},0x800,0x113000)/File(\\EFI\\debian\\grubx64.efi)`;
  const entries = [
    { num: '0001', label: 'debian (RAID, part0)', path: path('aaaa-old') },
    { num: '0002', label: 'debian (RAID, part1)', path: path('bbbb') },
    { num: '0003', label: 'UEFI Misc Device', path: 'PciRoot(0x0)/Pci(0x3,0x0)' },
  ];

  it('keeps the entry with the label that points at the loader on this partition', () => {
    expect(entryPlan(entries, 'debian (RAID, part1)', '\\EFI\\debian\\grubx64.efi', 'BBBB')).toEqual({
      keep: entries[1],
      remove: [],
    });
  });

  it('replaces an entry with the label that points at another partition (an ESP of an earlier deploy)', () => {
    expect(entryPlan(entries, 'debian (RAID, part0)', '\\EFI\\debian\\grubx64.efi', 'cccc')).toEqual({
      keep: null,
      remove: [entries[0]],
    });
  });

  it('without a partition GUID, label and loader decide', () => {
    expect(entryPlan(entries, 'debian (RAID, part0)', '\\EFI\\debian\\grubx64.efi').keep).toBe(entries[0]);
    expect(entryPlan(entries, 'debian (RAID, part0)', '\\EFI\\debian\\shimx64.efi')).toEqual({
      keep: null,
      remove: [entries[0]],
    });
  });
});
