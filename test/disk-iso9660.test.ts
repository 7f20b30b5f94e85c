// The in-memory ISO9660 reader against images genisoimage makes with and without Rock Ridge and Joliet.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { InvalidImage } from '../agent/errors.ts';
import { readIsoFiles } from '../agent/configdrive/iso9660.ts';

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

  it('refuses a truncated image with InvalidImage', async () => {
    const image = await iso(['-J', '-r']);
    expect(() => readIsoFiles(image.subarray(0, 17 * 2048 + 100))).toThrow(InvalidImage);
    expect(() => readIsoFiles(Buffer.alloc(40000))).toThrow(InvalidImage);
  });
});
