// A cancelled erase (the conductor aborting cleaning, a reset, the agent stopping) must stop within seconds:
// until it has, the executor's reset blocks lookup and heartbeats. Its discard and overwrite stop at once and
// no further method or disk starts; an ATA security erase already running is let finish (killing hdparm
// leaves the drive erasing and locked). Loop devices, fake hdparm and blkdiscard.
import { existsSync } from 'node:fs';
import { copyFile, open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import type { CommandRecord } from '../../agent/commands/executor.ts';
import { builtinStep, hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { startAgent } from '../helpers/api-harness.ts';
import { FAKE_HDPARM } from '../helpers/fake-hdparm.ts';
import { installFakes, type FakeTools } from '../helpers/fake-tools.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';
import { until } from '../helpers/until.ts';

let fakes: FakeTools | undefined;
afterEach(async () => {
  await fakes?.close();
  fakes = undefined;
});

const MARK = 4 * MiB;

/** Marks the first and last 4 MiB: whatever the erase wrote there no longer reads as the mark. */
async function mark(d: LoopDevice): Promise<void> {
  const fh = await open(d.path, 'r+');
  try {
    for (const at of [0, d.sizeBytes - MARK]) await fh.write(Buffer.alloc(MARK, 0xa5), 0, MARK, at);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Whether most of the first or last 4 MiB still holds the mark. The read-back's canaries, planted before each
 * method, take the outer MiB and perhaps a 64 KiB region or two; an overwrite that wrote there took all of it.
 */
async function marked(d: LoopDevice, at: 'head' | 'tail'): Promise<boolean> {
  const fh = await open(d.path, 'r');
  try {
    const buf = Buffer.alloc(MARK);
    await fh.read(buf, 0, MARK, at === 'head' ? 0 : d.sizeBytes - MARK);
    return buf.reduce((n, b) => n + (b === 0xa5 ? 1 : 0), 0) >= MARK / 2;
  } finally {
    await fh.close();
  }
}

/**
 * Starts erase_devices on `devs`, waits for `started`, cancels as a conductor's abort does, and returns how
 * long the cancel took and the command as it ended.
 */
async function cancelErase(
  devs: LoopDevice[],
  info: Record<string, unknown>,
  started: (progress: Record<string, { phase?: string; bytes_done?: number }>) => boolean | Promise<boolean>,
  flags: Record<string, string> = {},
): Promise<{ ms: number; record: CommandRecord }> {
  const running = await startAgent({ 'device-allowlist': devs.map((d) => d.path).join(','), ...flags });
  const client = new AgentClient({ url: running.url, pollIntervalMs: 100, pollAttempts: 600 });
  try {
    const step = { ...builtinStep('clean', 'erase_devices'), requires_ramdisk: true };
    const node = { uuid: '2005a784-89ea-4482-b56a-65497029a47e', properties: {}, driver_internal_info: info };
    await client.command(
      'clean.execute_clean_step',
      { step, node, ports: [], clean_version: hardwareManagerVersions() },
      { wait: false },
    );
    const { executor } = running.agent;
    const record = executor.current()!;
    await until('the erase to reach the point to cancel at', () => {
      expect(record.status, JSON.stringify(record.error)).toBe('RUNNING');
      return started((record.result as { disks?: Record<string, never> } | null)?.disks ?? {});
    });
    const t0 = Date.now();
    await executor.cancel('cancelled by the test');
    return { ms: Date.now() - t0, record };
  } finally {
    await client.close();
    await running.close();
  }
}

function expectCancelled(record: CommandRecord): void {
  expect(record.status).toBe('FAILED');
  expect(record.result).toBeNull();
  expect(record.error).toMatchObject({ type: 'CommandExecutionError' });
  expect(JSON.stringify(record.error)).toContain('cancelled by the test');
}

describe('a cancelled erase_devices', () => {
  it('stops the overwrite within seconds, fails with the cancellation, and starts no further disk', async () => {
    fakes = await installFakes({ hdparm: FAKE_HDPARM });
    await copyFile(
      join(import.meta.dirname, '..', 'fixtures', 'hdparm', 'unsupported.txt'),
      join(fakes.dir, 'identify.txt'),
    );
    await withLoops([768 * MiB, 768 * MiB], async (devs) => {
      for (const d of devs) await mark(d);
      let first: string | undefined;
      const { ms, record } = await cancelErase(
        devs,
        { agent_erase_devices_iterations: 2 },
        (disks) => {
          first = Object.keys(disks).find((k) => disks[k]!.phase === 'overwrite' && disks[k]!.bytes_done! > 0);
          return first !== undefined;
        },
        { 'ipa-erase-discard': 'false' },
      );
      expect(ms, 'the cancel waited for the overwrite').toBeLessThan(3000);
      expectCancelled(record);
      const [a, b] = first === devs[0]!.path ? devs : [devs[1]!, devs[0]!];
      expect(await marked(a!, 'head'), 'the overwrite never started').toBe(false);
      expect(await marked(a!, 'tail'), 'the overwrite ran to its end').toBe(true);
      expect(await marked(b!, 'head'), 'the next disk was erased after the cancel').toBe(true);
      expect(await marked(b!, 'tail'), 'the next disk was erased after the cancel').toBe(true);
    });
  });

  it('stops a running discard and does not go on to the overwrite', async () => {
    // A discard that takes longer than a cancel may wait.
    fakes = await installFakes({ blkdiscard: 'setTimeout(() => {}, 5000);' });
    await withLoops([64 * MiB], async ([d]) => {
      await mark(d!);
      const { ms, record } = await cancelErase(
        [d!],
        { agent_enable_ata_secure_erase: false },
        async () => (await fakes!.calls('blkdiscard')).length > 0,
      );
      expect(ms, 'the cancel waited for blkdiscard').toBeLessThan(3000);
      expectCancelled(record);
      expect(await fakes!.calls('blkdiscard'), 'a discard started after the cancel').toEqual([['-s', d!.path]]);
      expect(await marked(d!, 'head'), 'the overwrite started after the cancel').toBe(true);
    });
  });

  it('lets a running ATA security erase finish, then starts no further method', async () => {
    // The erase takes 1.5 s and fails: the node allows falling back, which a cancel must stop.
    const slowErase = `
if (/^--security-erase/.test(args[2] ?? '')) {
  Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 1500);
  fs.writeFileSync(state + '/erase-finished', '');
}
`;
    fakes = await installFakes({ hdparm: slowErase + FAKE_HDPARM, blkdiscard: 'process.exit(0);' });
    const f = fakes;
    await copyFile(
      join(import.meta.dirname, '..', 'fixtures', 'hdparm', 'normal-only.txt'),
      join(f.dir, 'identify.txt'),
    );
    await writeFile(join(f.dir, 'behaviour.json'), JSON.stringify({ eraseFails: true }));
    await withLoops([64 * MiB], async ([d]) => {
      await mark(d!);
      const { record } = await cancelErase([d!], { agent_continue_if_secure_erase_failed: true }, async () =>
        (await f.calls('hdparm')).some((a) => a.some((x) => x.startsWith('--security-erase'))),
      );
      expectCancelled(record);
      expect(existsSync(join(f.dir, 'erase-finished')), 'hdparm was killed mid-erase').toBe(true);
      const ops = (await f.calls('hdparm')).map((a) => a.find((x) => x.startsWith('--security-')) ?? a[0]);
      expect(ops.slice(ops.indexOf('--security-erase')), 'the password was left on the drive').toContain(
        '--security-disable',
      );
      expect(await f.calls('blkdiscard'), 'a discard started after the cancel').toEqual([]);
      expect(await marked(d!, 'head'), 'the overwrite started after the cancel').toBe(true);
    });
  });
});
