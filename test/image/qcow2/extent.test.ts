// The buffered route's check that a qcow2 file holds every cluster its tables name (agent/image/qcow2/extent.ts),
// against images qemu-img writes: whole ones pass, with 8-byte and with extended (16-byte) L2 entries, and a
// file cut short is refused naming what lies past its end.
import { randomBytes } from 'node:crypto';
import { stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { InvalidImage } from '../../../agent/errors.ts';
import { assertQcow2Within } from '../../../agent/image/qcow2/extent.ts';
import { workDir } from '../../helpers/make-image.ts';

let work: Awaited<ReturnType<typeof workDir>>;
let raw: string;
beforeAll(async () => {
  work = await workDir('ina-qcow2-extent-');
  raw = join(work.dir, 'data.raw');
  await writeFile(raw, randomBytes(3 * 1024 * 1024));
});
afterAll(() => work?.cleanup());

async function qcow2(name: string, options: string[]): Promise<{ file: string; size: number }> {
  const file = join(work.dir, name);
  await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', ...options, raw, file]);
  return { file, size: (await stat(file)).size };
}

describe('assertQcow2Within', () => {
  it.each([
    ['8-byte L2 entries', []],
    ['extended L2 entries (subclusters)', ['-o', 'extended_l2=on']],
    ['extended L2 entries, 2 MiB clusters', ['-o', 'extended_l2=on,cluster_size=2M']],
  ])('passes a whole image with %s', async (name, options) => {
    const { file, size } = await qcow2(`${name.replace(/\W+/g, '-')}.qcow2`, options);
    await expect(assertQcow2Within(file, size)).resolves.toBeUndefined();
  });

  it('refuses an image with extended L2 entries cut short, naming the first cluster past its end', async () => {
    const { file, size } = await qcow2('cut.qcow2', ['-o', 'extended_l2=on']);
    await truncate(file, size - 1024 * 1024);
    const err = await assertQcow2Within(file, size - 1024 * 1024).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(InvalidImage);
    expect((err as Error).message).toMatch(/^the qcow2 image is truncated: its data cluster 0:\d+ reaches byte \d+/);
  });
});
