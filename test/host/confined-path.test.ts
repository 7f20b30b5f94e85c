// Paths inside an image's filesystem, used from outside it: a symlink in the image must never lead the agent's
// mounts or writes into the ramdisk. Plain folders and symlinks in a temporary folder stand in for the image.
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { confinedDir, confinedPath, pathExists } from '../../agent/host/confined-path.ts';

let work: string;
let image: string;
let outside: string;
const refuse = (why: string) => new Error(`refused: ${why}`);

beforeAll(async () => {
  work = await mkdtemp(join(tmpdir(), 'ina-confined-'));
  image = join(work, 'image');
  outside = join(work, 'ramdisk-usr-bin');
  await mkdir(outside);
  for (const d of ['dev', 'etc/default', 'usr/sbin']) await mkdir(join(image, d), { recursive: true });
  await writeFile(join(image, 'usr/sbin/grub-install'), '');
  await writeFile(join(image, 'run'), 'a file, not a folder');
  await symlink(outside, join(image, 'boot'));
  await symlink('usr/sbin', join(image, 'sbin'));
  await symlink('/etc', join(image, 'etc2'));
  await symlink('../../..', join(image, 'etc/up'));
  await symlink('/etc/passwd', join(image, 'etc/default/grub'));
});

afterAll(async () => {
  await rm(work, { recursive: true, force: true });
});

describe('confinedDir', () => {
  it('gives a real folder inside the image', async () => {
    expect(await confinedDir(image, 'dev', refuse)).toBe(join(image, 'dev'));
  });

  it('refuses a folder that is a symlink out of the image (boot -> the ramdisk), a file, and a missing one', async () => {
    await expect(confinedDir(image, 'boot', refuse)).rejects.toThrow('refused: boot is a symlink in the image');
    await expect(confinedDir(image, 'run', refuse)).rejects.toThrow('refused: run is not a folder');
    await expect(confinedDir(image, 'proc', refuse)).rejects.toThrow('refused: proc is missing');
  });
});

describe('confinedPath', () => {
  it('follows a relative symlink that stays inside (usr-merged sbin)', async () => {
    expect(await confinedPath(image, 'sbin/grub-install', { refuse })).toBe(join(image, 'usr/sbin/grub-install'));
  });

  it('refuses a route through a symlink out of the image, and a final symlink', async () => {
    await expect(confinedPath(image, 'etc2/default/grub', { refuse })).rejects.toThrow(
      'refused: etc2/default/grub leads outside its filesystem',
    );
    await expect(confinedPath(image, 'etc/up/x', { refuse })).rejects.toThrow('leads outside its filesystem');
    await expect(confinedPath(image, 'etc/default/grub', { refuse })).rejects.toThrow(
      'refused: etc/default/grub is a symlink in the image',
    );
    await expect(confinedPath(image, '..', { refuse })).rejects.toThrow('leads outside');
  });

  it('makes missing folders only when asked, each inside', async () => {
    await expect(confinedPath(image, 'var/lib/x', { refuse })).rejects.toThrow('refused: var/lib/x: var is missing');
    expect(await pathExists(join(image, 'var'))).toBe(false);
    expect(await confinedPath(image, 'var/lib/x', { refuse, makeDirs: {} })).toBe(join(image, 'var/lib/x'));
    expect(await pathExists(join(image, 'var/lib'))).toBe(true);
    await expect(confinedPath(image, 'boot/evil', { refuse, makeDirs: {} })).rejects.toThrow('leads outside');
  });
});
