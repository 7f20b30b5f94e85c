// writeAll against a real block device: a write that runs past the device's end is taken only in part by
// the kernel; writeAll says so instead of returning as if all of it was written.
import { open } from 'node:fs/promises';
import { describe, expect, it } from 'vitest';
import { writeAll } from '../../agent/host/write-all.ts';
import { MiB, withLoops } from '../helpers/loop.ts';

describe('writeAll', () => {
  it('writes everything, and throws where the device takes only part of it (a plain write returns short)', () =>
    withLoops([4 * MiB], async ([loop]) => {
      const fh = await open(loop!.path, 'r+');
      try {
        const data = Buffer.alloc(8192, 0x5a);
        await writeAll(fh, data, 0, data.length, 0);
        const back = Buffer.alloc(8192);
        await fh.read(back, 0, back.length, 0);
        expect(back.equals(data)).toBe(true);
        const end = loop!.sizeBytes;
        expect((await fh.write(data, 0, data.length, end - 4096)).bytesWritten).toBe(4096);
        await expect(writeAll(fh, data, 0, data.length, end - 4096)).rejects.toThrow();
      } finally {
        await fh.close();
      }
    }));
});
