// Image buffer files carry their owner (pid and process start time); one whose process is gone, or that
// this process no longer uses, is deleted at start and before each buffered deploy. Files of live owners
// and anything else in the directory stay.
import { spawnSync } from 'node:child_process';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { afterEach, beforeEach, expect, it } from 'vitest';
import { bufferPath, cleanStaleBuffers, discardBuffer } from '../../agent/image/buffer.ts';
import { nullLogger } from '../../agent/log.ts';

let dir: string;
beforeEach(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-buffers-'));
});
afterEach(async () => {
  await rm(dir, { recursive: true, force: true });
});

async function startTimeOf(pid: number): Promise<string> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[19]!;
}

it('deletes buffers of dead processes and unused ones of its own; keeps live ones and other files', async () => {
  const dead = spawnSync('true').pid!;
  const parent = process.ppid;
  const parentStart = await startTimeOf(parent);
  const names = {
    dead: `ina-image-${dead}.${await startTimeOf(process.pid)}-img-00000000`,
    reused: `ina-image-${parent}.${Number(parentStart) + 1}-img-00000001`,
    liveOther: `ina-image-${parent}.${parentStart}-img-00000002`,
    unrelated: 'not-ours.img',
    legacy: 'ina-image-img-deadbeef',
  };
  for (const n of Object.values(names)) await writeFile(join(dir, n), 'x');
  const mineInUse = bufferPath(dir, 'in-use');
  const mineLeaked = bufferPath(dir, 'leaked');
  await writeFile(mineInUse, 'x');
  await writeFile(mineLeaked, 'x');
  // A deploy that was cut short in this process (an agent torn down mid-deploy) leaves its file unused.
  await discardBuffer(mineLeaked);
  await writeFile(mineLeaked, 'x');

  const removed = await cleanStaleBuffers(dir, nullLogger);
  expect(removed.map((p) => basename(p)).sort()).toEqual([names.dead, names.reused, basename(mineLeaked)].sort());
  expect((await readdir(dir)).sort()).toEqual(
    [names.liveOther, names.unrelated, names.legacy, basename(mineInUse)].sort(),
  );
  await discardBuffer(mineInUse);
  expect(await readdir(dir)).not.toContain(basename(mineInUse));
});

it('a missing directory is not an error', async () => {
  expect(await cleanStaleBuffers(join(dir, 'nope'), nullLogger)).toEqual([]);
});

it('a buffered deploy (at the least convert memory limit) first deletes what a dead deploy left in the buffer directory', async () => {
  const { withLoops, MiB } = await import('../helpers/loop.ts');
  const { makeDiskImage, toQcow2, workDir } = await import('../helpers/make-image.ts');
  const { startImageServer } = await import('../helpers/image-server.ts');
  const { runToEnd, startImageAgent } = await import('../helpers/image-agent.ts');
  const { createHash } = await import('node:crypto');
  const work = await workDir();
  const images = await startImageServer();
  try {
    const qcow2 = await toQcow2((await makeDiskImage(work.dir, { sizeMiB: 6 })).path);
    const url = await images.serveFile('b.qcow2', qcow2);
    const digest = createHash('sha256')
      .update(await readFile(qcow2))
      .digest('hex');
    const dead = spawnSync('true').pid!;
    const leftover = join(dir, `ina-image-${dead}.${await startTimeOf(process.pid)}-old-00000000`);
    await writeFile(leftover, Buffer.alloc(MiB));
    await withLoops([16 * MiB], async ([loop]) => {
      // The buffered route (qcow2 streaming off), at the least convert memory limit the configuration accepts.
      const a = await startImageAgent(loop!.path, {
        'ipa-image-buffer-dir': dir,
        'ipa-image-convert-memory-limit': '384',
        'ina-qcow2-stream-spool': '0',
      });
      try {
        const r = await runToEnd(a.url, 'standby.prepare_image', {
          image_info: { id: 'b', urls: [url], os_hash_algo: 'sha256', os_hash_value: digest, disk_format: 'qcow2' },
        });
        expect(r.command_status, JSON.stringify(r.command_error)).toBe('SUCCEEDED');
      } finally {
        await a.close();
      }
    });
    expect(await readdir(dir)).toEqual([]);
  } finally {
    await images.close();
    await work.cleanup();
  }
});
