// The in-memory ISO9660 reader against images genisoimage makes with and without Rock Ridge and Joliet.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { InvalidImage } from '../../agent/errors.ts';
import { readIsoFiles } from '../../agent/configdrive/iso9660.ts';

const FILES: Record<string, Buffer> = {
  'openstack/latest/meta_data.json': Buffer.from('{"uuid": "u"}'),
  'openstack/latest/user_data': Buffer.from('#cloud-config\n'),
  'openstack/latest/vendor_data2.json': Buffer.from('{}'),
  'openstack/2012-08-10/network_data.json': Buffer.from('{"links": []}'),
  'openstack/content/0000': Buffer.alloc(5000, 7),
  'ec2/latest/empty': Buffer.alloc(0),
  'a-directory-with-a-rather-long-name/and.multiple.dots.in.name.txt': Buffer.from('x'.repeat(3000)),
};

async function iso(flags: string[], files: Record<string, Buffer> = FILES): Promise<Buffer> {
  const work = await mkdtemp(join(tmpdir(), 'ina-iso-'));
  try {
    for (const [path, data] of Object.entries(files)) {
      await mkdir(dirname(join(work, 'tree', path)), { recursive: true });
      await writeFile(join(work, 'tree', path), data);
    }
    await execa('genisoimage', ['-quiet', '-o', join(work, 'x.iso'), ...flags, '-V', 'config-2', join(work, 'tree')]);
    return await readFile(join(work, 'x.iso'));
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

const asMap = (files: { path: string; data: Buffer }[]) =>
  Object.fromEntries(files.map((f) => [f.path, f.data.toString('hex')]));
const expected = (files: Record<string, Buffer>) =>
  Object.fromEntries(Object.entries(files).map(([p, d]) => [p, d.toString('hex')]));

describe('readIsoFiles', () => {
  it('reads ironic-style images (Rock Ridge + Joliet) exactly', async () => {
    const image = await iso(['-ldots', '-allow-lowercase', '-allow-multidot', '-l', '-J', '-r']);
    expect(asMap(readIsoFiles(image))).toEqual(expected(FILES));
  });

  it('reads Rock Ridge-only images', async () => {
    expect(asMap(readIsoFiles(await iso(['-r'])))).toEqual(expected(FILES));
  });

  it('reads Joliet-only images', async () => {
    const files = { ...FILES };
    expect(asMap(readIsoFiles(await iso(['-J', '-joliet-long'], files)))).toEqual(expected(files));
  });

  it('reads plain ISO9660 names (level 4 keeps them as given)', async () => {
    const files = { 'openstack/latest/meta_data.json': Buffer.from('{}') };
    expect(asMap(readIsoFiles(await iso(['-iso-level', '4'], files)))).toEqual(expected(files));
  });

  it('refuses a directory tree whose records lead to one directory twice', () => {
    // 17 levels of directories, each level's records both naming the next level: 2^16 paths from 70 KiB (and
    // with more records per level, more paths than memory holds).
    expect(() => readIsoFiles(craftedIso({ levels: 16, fanOut: 2 }))).toThrow(
      /^config drive ISO9660 image is malformed: the directory at sector \d+ is reached twice$/,
    );
  });

  it('refuses files that add up to more than a config drive holds (records sharing one extent)', () => {
    const image = craftedIso({ levels: 0, fanOut: 0, files: 40, fileBytes: 2 * 1024 * 1024 });
    expect(() => readIsoFiles(image)).toThrow(/its files hold more than 67108864 bytes/);
    expect(readIsoFiles(craftedIso({ levels: 0, fanOut: 0, files: 3, fileBytes: 2 * 1024 * 1024 }))).toHaveLength(3);
  });

  it('refuses a truncated image with InvalidImage', async () => {
    const image = await iso(['-J', '-r']);
    expect(() => readIsoFiles(image.subarray(0, 17 * 2048 + 100))).toThrow(InvalidImage);
    expect(() => readIsoFiles(Buffer.alloc(40000))).toThrow(InvalidImage);
  });
});

/**
 * A hand-made ISO9660 image (no Rock Ridge, no Joliet): a root, then `levels` directories each holding `fanOut`
 * records that all name the next one, then `files` records that all name one extent of `fileBytes`.
 */
function craftedIso(o: { levels: number; fanOut: number; files?: number; fileBytes?: number }): Buffer {
  const S = 2048;
  const first = 18;
  const fileSector = first + o.levels + 1;
  const fileBytes = o.fileBytes ?? 4;
  const iso = Buffer.alloc(S * fileSector + fileBytes);
  const record = (at: number, extent: number, size: number, dir: boolean, name: string): number => {
    const n = Buffer.from(name, 'latin1');
    const length = 33 + n.length + (n.length % 2 === 0 ? 1 : 0);
    iso[at] = length;
    iso.writeUInt32LE(extent, at + 2);
    iso.writeUInt32LE(size, at + 10);
    iso[at + 25] = dir ? 2 : 0;
    iso[at + 32] = n.length;
    n.copy(iso, at + 33);
    return length;
  };
  iso[16 * S] = 1;
  iso.write('CD001', 16 * S + 1, 'latin1');
  iso[17 * S] = 255;
  iso.write('CD001', 17 * S + 1, 'latin1');
  record(16 * S + 156, first, S, true, '\0');
  for (let level = 0; level <= o.levels; level++) {
    let at = (first + level) * S;
    at += record(at, first + level, S, true, '\0');
    at += record(at, first + level, S, true, '\x01');
    if (level < o.levels) for (let i = 0; i < o.fanOut; i++) at += record(at, first + level + 1, S, true, `D${i}`);
    else for (let i = 0; i < (o.files ?? 1); i++) at += record(at, fileSector, fileBytes, false, `F${i};1`);
  }
  return iso;
}
