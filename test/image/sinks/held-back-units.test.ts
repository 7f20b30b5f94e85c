// The held-back ranges' arithmetic (which bytes a sink keeps in memory, which it writes at once) and the write
// journal's start-up cleanup when the device is refused, without devices.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DeviceTarget } from '../../../agent/image/sinks/device-target.ts';
import { HeldBack, heldRanges } from '../../../agent/image/sinks/held-back.ts';
import {
  WriteJournal,
  clearUnfinishedWrite,
  journalPath,
  unfinishedWrite,
} from '../../../agent/image/sinks/write-journal.ts';
import { nullLogger } from '../../../agent/log.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';

const MiB = 1024 * 1024;
const bytes = (n: number, seed: number) => Buffer.from(Array.from({ length: n }, (_, i) => (i * 7 + seed) & 0xff));

describe('held-back ranges', () => {
  it('are the first MiB and the last, 4 KiB-aligned, and overlap on a tiny device', () => {
    expect(heldRanges(100 * MiB)).toEqual({ headEnd: MiB, tailStart: 99 * MiB });
    // 512-byte-sector sizes: the tail starts at the 4 KiB boundary at or before the last MiB.
    expect(heldRanges(100 * MiB + 512)).toEqual({ headEnd: MiB, tailStart: 99 * MiB });
    expect(heldRanges(MiB + 4096)).toEqual({ headEnd: MiB, tailStart: MiB });
    expect(heldRanges(512 * 1024)).toEqual({ headEnd: 512 * 1024, tailStart: 512 * 1024 });
  });

  it('keep what touches the ranges and hand back the part between them', () => {
    const held = new HeldBack(10 * MiB);
    expect(held.passes(MiB, 8 * MiB)).toBe(true);
    expect(held.passes(MiB - 1, 2)).toBe(false);
    // A piece across the head's end: its first 4096 bytes are kept, the rest is the caller's.
    const a = bytes(8192, 1);
    expect(held.take(MiB - 4096, a)).toEqual([4096, 8192]);
    // One across the tail's start, running to the device's end.
    const b = bytes(MiB + 4096, 2);
    expect(held.take(9 * MiB - 4096, b)).toEqual([0, 4096]);
    // One wholly inside the head.
    const c = bytes(512, 3);
    expect(held.take(0, c)).toEqual([512, 512]);
    expect(held.imageHead(512).equals(c)).toBe(true);
    // Zeros placed across the head's end: offsets on the device for the part between.
    expect(held.zero(MiB - 512, 1024)).toEqual([MiB, MiB + 512]);
    expect(held.bytes).toBe(MiB + MiB);
  });

  it('hand back nothing for a piece inside both ranges on a device of two MiB or less', () => {
    const held = new HeldBack(2 * MiB);
    const d = bytes(2 * MiB, 4);
    const [from, to] = held.take(0, d);
    expect(to - from).toBe(0);
    expect(held.imageHead(2 * MiB).equals(d.subarray(0, MiB))).toBe(true);
  });
});

describe('the write journal', () => {
  let dir: string;
  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ina-journal-'));
  });
  afterAll(async () => rm(dir, { recursive: true, force: true }));

  it('notes a write beside the status file and forgets it at the end; none without a status file', async () => {
    const status = join(dir, 'status.json');
    const file = journalPath(status)!;
    const journal = new WriteJournal(file);
    journal.begin('/dev/ina-none', 5 * MiB);
    expect(JSON.parse(await readFile(file, 'utf8'))).toMatchObject({ device: '/dev/ina-none', size: 5 * MiB });
    expect(unfinishedWrite(file)).toMatchObject({ device: '/dev/ina-none', size: 5 * MiB });
    journal.end();
    expect(existsSync(file)).toBe(false);
    expect(journalPath(undefined)).toBeUndefined();
    new WriteJournal(undefined).begin('/dev/ina-none', MiB);
  });

  it('at start, leaves a device the guard refuses alone, says so, and drops the note', async () => {
    const status = join(dir, 'refused.json');
    const file = journalPath(status)!;
    // Not on the allow-list: the guard refuses before anything is opened.
    new WriteJournal(file).begin('/dev/ina-not-allowed', 5 * MiB);
    const line = await clearUnfinishedWrite(status, new DeviceGuard(['/dev/ina-only-this']), nullLogger);
    expect(line).toMatch(
      /^could not clear \/dev\/ina-not-allowed, left by an image write begun at \S+ that never finished: refusing to clear the signatures of \/dev\/ina-not-allowed/,
    );
    expect(existsSync(file)).toBe(false);
  });

  it('a write whose clearing fails before its first byte leaves no note (the next start would wipe that disk)', async () => {
    const file = journalPath(join(dir, 'unclear.json'))!;
    const target = new DeviceTarget(
      { path: '/dev/ina-not-allowed', size: 5 * MiB, logicalSectorSize: 512 },
      new DeviceGuard(['/dev/ina-only-this']),
      nullLogger,
      new WriteJournal(file),
    );
    await expect(target.prepare()).rejects.toThrow(/refusing to clear the signatures of \/dev\/ina-not-allowed/);
    expect(existsSync(file)).toBe(false);
  });

  it('at start, leaves a device named by a note from another boot alone (the path may name another disk)', async () => {
    const status = join(dir, 'rebooted.json');
    const file = journalPath(status)!;
    const earlier = join(dir, 'boot_id');
    await writeFile(earlier, '00000000-0000-4000-8000-000000000000\n');
    new WriteJournal(file, earlier).begin('/dev/ina-not-allowed', 5 * MiB);
    expect(unfinishedWrite(file)?.boot_id).toBe('00000000-0000-4000-8000-000000000000');
    const line = await clearUnfinishedWrite(status, new DeviceGuard(['/dev/ina-not-allowed']), nullLogger);
    expect(line).toMatch(
      /^left \/dev\/ina-not-allowed alone, named by an image write begun at \S+ that never finished: the machine has rebooted since \(boot id 00000000-0000-4000-8000-000000000000, now [0-9a-f-]{36}\)/,
    );
    expect(existsSync(file)).toBe(false);
    // A note without a boot id (an older agent's) cannot be shown to be from this boot either.
    await writeFile(file, JSON.stringify({ device: '/dev/ina-not-allowed', size: 5 * MiB, started_at: 1 }));
    expect(await clearUnfinishedWrite(status, new DeviceGuard(['/dev/ina-not-allowed']), nullLogger)).toMatch(
      /: the machine has rebooted since \(boot id unknown/,
    );
  });

  it('ignores a malformed note', async () => {
    const status = join(dir, 'bad.json');
    await writeFile(journalPath(status)!, '{"device": 3}');
    expect(await clearUnfinishedWrite(status, new DeviceGuard(['/dev/ina-only-this']), nullLogger)).toBeUndefined();
    expect(existsSync(journalPath(status)!)).toBe(false);
  });
});
