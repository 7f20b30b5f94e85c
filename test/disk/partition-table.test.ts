// The pure partition arithmetic behind config drive placement, and the partx parser.
import { describe, expect, it } from 'vitest';
import { MiB, mbrTailRegion, parsePartx, tailPlacement } from '../../agent/disk/partition-table.ts';

describe('tailPlacement', () => {
  it.each([
    [
      '512-byte sectors, end of a 200 MiB GPT disk',
      { first: 67584, last: 409566 },
      512,
      { first: 276480, last: 407551 },
    ],
    ['4 KiB sectors', { first: 8448, last: 51194 }, 4096, { first: 34560, last: 50943 }],
    ['region exactly 64 MiB and aligned', { first: 2048, last: 2048 + 131071 }, 512, { first: 2048, last: 133119 }],
    ['region one sector short', { first: 2048, last: 2048 + 131070 }, 512, null],
    ['region after rounding down falls before its start', { first: 2049, last: 2049 + 131100 }, 512, null],
  ])('%s', (_label, region, sectorSize, expected) => {
    const placed = tailPlacement(region, 64 * MiB, sectorSize);
    expect(placed).toEqual(expected);
    if (placed) {
      expect((placed.last - placed.first + 1) * sectorSize).toBe(64 * MiB);
      expect((placed.first * sectorSize) % MiB).toBe(0);
      expect(placed.last).toBeLessThanOrEqual(region.last);
    }
  });
});

describe('mbrTailRegion', () => {
  const part = (startMiB: number, sizeMiB: number) => ({
    number: 1,
    start: startMiB * MiB,
    size: sizeMiB * MiB,
    uuid: '',
    type: '0x83',
  });

  it('starts after the last partition and ends at the last sector', () => {
    expect(mbrTailRegion([part(1, 32)], 160 * MiB, 512)).toEqual({ first: 33 * 2048, last: 160 * 2048 - 1 });
  });

  it('keeps the first MiB free on an empty table', () => {
    expect(mbrTailRegion([], 100 * MiB, 512).first).toBe(2048);
  });

  it('stops at the 2^32-sector MBR limit on larger disks', () => {
    expect(mbrTailRegion([part(1, 99)], 3 * 2 ** 40, 512).last).toBe(2 ** 32 - 1);
    expect(mbrTailRegion([part(1, 99)], 3 * 2 ** 40, 4096).last).toBe((3 * 2 ** 40) / 4096 - 1);
  });
});

describe('parsePartx', () => {
  it('reads partx -P lines into bytes', () => {
    const text =
      'NR="1" START="2048" SECTORS="65536" UUID="7383264C-01" TYPE="0x83"\nNR="2" START="278528" SECTORS="131072" UUID="7383264c-02" TYPE="0xC"\n';
    expect(parsePartx(text)).toEqual([
      { number: 1, start: MiB, size: 32 * MiB, uuid: '7383264c-01', type: '0x83' },
      { number: 2, start: 136 * MiB, size: 64 * MiB, uuid: '7383264c-02', type: '0xc' },
    ]);
    expect(parsePartx('')).toEqual([]);
  });
});
