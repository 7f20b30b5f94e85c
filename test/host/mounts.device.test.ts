// The agent's mounts on a real filesystem (a loop device the test made): a mount and the binds stacked on it are
// undone innermost first however the work ends, and one held busy is detached lazily and named, so nothing stays in
// the mount table.
import { readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { MountStack, withMounted } from '../../agent/host/mounts.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

async function mounted(): Promise<string> {
  return readFile('/proc/self/mountinfo', 'utf8');
}

describe('mounts', () => {
  it('withMounted mounts on a private folder and unmounts and removes it, also when the body throws', async () => {
    await withLoops([32 * MiB], async ([dev]) => {
      await execa('mkfs.ext4', ['-q', dev!.path]);
      let seen = '';
      await withMounted(dev!.path, async (dir) => {
        seen = dir;
        await writeFile(join(dir, 'kept'), 'yes');
        expect(await mounted()).toContain(` ${dir} `);
      });
      expect(await mounted()).not.toContain(` ${seen} `);
      await expect(stat(seen)).rejects.toThrow(/ENOENT/);
      // the write reached the filesystem: read-only this time, and the error of the body is the one thrown
      await expect(
        withMounted(
          dev!.path,
          async (dir) => {
            seen = dir;
            expect(await readFile(join(dir, 'kept'), 'utf8')).toBe('yes');
            await expect(writeFile(join(dir, 'other'), 'no')).rejects.toThrow(/EROFS/);
            throw new Error('the body failed');
          },
          { options: 'ro' },
        ),
      ).rejects.toThrow('the body failed');
      expect(await mounted()).not.toContain(` ${seen} `);
    });
  });

  it('releases stacked mounts innermost first, and detaches a busy one lazily, naming it', async () => {
    await withLoops([32 * MiB], async ([dev]) => {
      await execa('mkfs.ext4', ['-q', dev!.path]);
      const mounts = new MountStack();
      const root = await mounts.mountAtNewDir([dev!.path], 'ina-test-mounts-');
      await execa('mkdir', ['-p', join(root, 'proc'), join(root, 'busy')]);
      await mounts.mount(['-t', 'proc', 'proc'], join(root, 'proc'));
      // a process whose working folder is on the filesystem keeps it busy: umount fails with EBUSY
      const holder = execa('sleep', ['60'], { cwd: join(root, 'busy'), reject: false });
      try {
        await new Promise((r) => setTimeout(r, 200));
        const stuck = await mounts.release();
        expect(stuck).toHaveLength(1);
        expect(stuck[0]).toContain(root);
        // proc came off normally (innermost first), and the busy root was detached: neither is in the table
        const table = await mounted();
        expect(table).not.toContain(` ${join(root, 'proc')} `);
        expect(table).not.toContain(` ${root} `);
      } finally {
        holder.kill('SIGKILL');
        await holder;
      }
    });
  });
});
