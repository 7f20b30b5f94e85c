// The device guard and multipath: two loop devices stand for the two paths of a LUN, in a sysfs class tree
// that shows them as the slaves of a multipath map dm-0 (this machine has no device-mapper). A path alone is
// refused naming the map, also when the map is mounted (then the in-use rule would refuse them as under dm-0).
import { mkdir, mkdtemp, rm, stat, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DeviceGuard } from '../../agent/safety/device-guard.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

const WWID = '36001405abcdef0123456789abcdef01';

async function tree(paths: string[], mountinfo: string) {
  const root = await mkdtemp(join(tmpdir(), 'ina-mpath-guard-'));
  const devBlock = join(root, 'dev/block');
  const classBlock = join(root, 'class/block');
  await mkdir(devBlock, { recursive: true });
  await mkdir(join(classBlock, 'dm-0/slaves'), { recursive: true });
  await mkdir(join(classBlock, 'dm-0/dm'), { recursive: true });
  await writeFile(join(classBlock, 'dm-0/dm/uuid'), `mpath-${WWID}\n`);
  await writeFile(join(classBlock, 'dm-0/dm/name'), `${WWID}\n`);
  for (const path of paths) {
    const name = path.slice(5);
    const rdev = (await stat(path)).rdev;
    await mkdir(join(classBlock, name), { recursive: true });
    await writeFile(join(classBlock, 'dm-0/slaves', name), '');
    await symlink(
      `../../devices/virtual/block/${name}`,
      join(devBlock, `${Math.floor(rdev / 256) & 0xfff}:${rdev & 0xff}`),
    );
  }
  await symlink('../../devices/virtual/block/dm-0', join(devBlock, '253:0'));
  await writeFile(join(root, 'mountinfo'), mountinfo);
  await writeFile(join(root, 'swaps'), 'Filename Type Size Used Priority\n');
  const guard = (allow: string[] | null) =>
    new DeviceGuard(allow, {
      mountinfo: join(root, 'mountinfo'),
      swaps: join(root, 'swaps'),
      sysClassBlock: classBlock,
      sysDevBlock: devBlock,
    });
  return { guard, cleanup: () => rm(root, { recursive: true, force: true }) };
}

describe('device guard: multipath paths', () => {
  it('refuses a path of a map on its own, naming the map, allow-listed or not', () =>
    withLoops([8 * MiB, 8 * MiB, 8 * MiB], async ([a, b, other]) => {
      const t = await tree([a!.path, b!.path], '22 1 0:21 / /proc rw - proc proc rw\n');
      try {
        const names = [a!.path.slice(5), b!.path.slice(5)].sort().join(', ');
        for (const allow of [null, [a!.path, b!.path]]) {
          expect(await t.guard(allow).verdict(b!.path)).toEqual({
            ok: false,
            reason:
              `it is a path of /dev/dm-0 (multipath map /dev/mapper/${WWID} of LUN ${WWID}, paths ${names}); a ` +
              'multipath LUN is written and erased only through its map: name /dev/dm-0 (or its serial or wwn) instead',
          });
        }
        await expect(t.guard(null).assertWritable(a!.path, 'write an image to')).rejects.toThrow(
          `refusing to write an image to ${a!.path}: it is a path of /dev/dm-0`,
        );
        // A device outside the map is not concerned.
        expect(await t.guard(null).verdict(other!.path)).toEqual({ ok: true });
      } finally {
        await t.cleanup();
      }
    }));

  it('refuses the paths of a mounted map (the path rule comes before the in-use one, which names dm-0 too)', () =>
    withLoops([8 * MiB, 8 * MiB], async ([a, b]) => {
      const t = await tree([a!.path, b!.path], `30 1 253:0 / /srv/san rw,relatime - ext4 /dev/mapper/${WWID} rw\n`);
      try {
        const reasons = await Promise.all(
          [a!.path, b!.path].map(async (p) => {
            const v = await t.guard([a!.path, b!.path]).verdict(p);
            return v.reason;
          }),
        );
        for (const r of reasons) expect(r).toMatch(/^it is a path of \/dev\/dm-0 /);
      } finally {
        await t.cleanup();
      }
    }));
});
