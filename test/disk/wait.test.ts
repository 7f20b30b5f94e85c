// IPA's wait for disks at start (ipa-disk-wait-attempts / ipa-disk-wait-delay), on virtual time: lsblk's answers
// change between attempts as a storage driver finds its disks.
import { describe, expect, it } from 'vitest';
import { blockDevicesFrom, waitForDisks, type DiskWait } from '../../agent/disk/block-devices.ts';
import { createLogger } from '../../agent/log.ts';
import { VirtualClock } from '../helpers/virtual-clock.ts';

const GiB = 2 ** 30;
const lsblk = (...disks: [string, number, string][]) =>
  JSON.stringify({
    blockdevices: disks.map(([kname, size, type]) => ({ kname, path: `/dev/${kname}`, size, type })),
  });

function wait(answers: string[], opts: Partial<DiskWait> = {}) {
  const clock = new VirtualClock();
  let calls = 0;
  const w: DiskWait = {
    attempts: 10,
    delayS: 3,
    clock,
    log: createLogger({ debug: false, quiet: true }).log,
    allowlisted: new Set(),
    list: async () => {
      const answer = answers[Math.min(calls++, answers.length - 1)]!;
      if (answer === 'fail') throw new Error('lsblk: cannot run');
      return blockDevicesFrom(answer, new Set(['loop5']), '/nonexistent/sys/block');
    },
    ...opts,
  };
  return { clock, calls: () => calls, run: () => waitForDisks(w) };
}

describe('waiting for a disk at start', () => {
  it('lists again every delay until a disk of at least 4 GiB appears', async () => {
    const w = wait([
      'fail',
      lsblk(['sda', 1 * GiB, 'disk']),
      lsblk(['sda', 1 * GiB, 'disk'], ['sdb', 8 * GiB, 'disk']),
    ]);
    expect((await w.run())?.name).toBe('sdb');
    expect(w.calls()).toBe(3);
    expect(w.clock.sleeps).toEqual([3000, 3000]);
  });

  it('gives up after the attempts, without a pause after the last, and the agent goes on', async () => {
    const w = wait([lsblk(['sda', 1 * GiB, 'disk'])], { attempts: 4, delayS: 0.5 });
    expect(await w.run()).toBeUndefined();
    expect(w.calls()).toBe(4);
    expect(w.clock.sleeps).toEqual([500, 500, 500]);
  });

  it('counts an allow-listed device whatever its size; 0 attempts does not look at all', async () => {
    const w = wait([lsblk(['loop5', 16 * 2 ** 20, 'loop'])], { allowlisted: new Set(['loop5']) });
    expect((await w.run())?.name).toBe('loop5');
    expect(w.clock.sleeps).toEqual([]);
    const none = wait([lsblk()], { attempts: 0 });
    expect(await none.run()).toBeUndefined();
    expect(none.calls()).toBe(0);
  });
});
