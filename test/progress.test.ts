// The progress meter: what a RUNNING command reports, and the log line that says how long each phase took.
import pino from 'pino';
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { LogRing } from '../agent/log.ts';
import { ProgressMeter, type ProgressReport } from '../agent/progress.ts';

const MiB = 1024 * 1024;

function meter() {
  const ring = new LogRing();
  const reports: ProgressReport[] = [];
  const m = new ProgressMeter((r) => reports.push(r), pino({ base: null }, ring), 'image');
  const records = () => ring.tail().map((l) => JSON.parse(l) as Record<string, unknown>);
  return { m, reports, records, ended: () => records().filter((r) => 'phase_s' in r) };
}

describe('ProgressMeter', () => {
  beforeEach(() => vi.useFakeTimers({ now: new Date('2026-12-03T12:00:00Z') }));
  afterEach(() => vi.useRealTimers());

  it('reports bytes, rate and eta while a phase runs', () => {
    const { m, reports } = meter();
    m.start('download', 100 * MiB);
    vi.advanceTimersByTime(2000);
    m.add(40 * MiB);
    expect(reports.at(-1)).toEqual({
      phase: 'download',
      bytes_done: 40 * MiB,
      bytes_total: 100 * MiB,
      rate_bps: 20 * MiB,
      eta_s: 3,
    });
  });

  it('logs when each phase starts, how long it took when the next starts, and the last one on finish, once', () => {
    const { m, ended, records } = meter();
    m.start('download', 64 * MiB);
    vi.advanceTimersByTime(2000);
    m.add(64 * MiB);
    m.start('convert', 128 * MiB, { device: '/dev/loop9' });
    expect(ended()).toEqual([
      expect.objectContaining({
        phase: 'download',
        phase_s: 2,
        bytes_done: 64 * MiB,
        msg: 'image download took 2 s (64.0 MiB at 32.0 MiB/s)',
      }),
    ]);
    vi.advanceTimersByTime(500);
    m.finish();
    m.finish();
    expect(records().map((r) => r.msg)).toEqual([
      'image download started (64.0 MiB)',
      'image download took 2 s (64.0 MiB at 32.0 MiB/s)',
      'image convert started (128.0 MiB)',
      'image convert took 0.5 s',
    ]);
    expect(ended()).toHaveLength(2);
    expect(ended()[1]).toEqual(
      expect.objectContaining({
        phase: 'convert',
        device: '/dev/loop9',
        phase_s: 0.5,
        bytes_done: 0,
        msg: 'image convert took 0.5 s',
      }),
    );
  });

  it('takes a total that becomes known after the phase started', () => {
    const { m, reports } = meter();
    m.start('download', null);
    expect(reports.at(-1)).toMatchObject({ phase: 'download', bytes_total: null, eta_s: null });
    m.setTotal(10 * MiB);
    vi.advanceTimersByTime(1000);
    m.add(5 * MiB);
    expect(reports.at(-1)).toMatchObject({ phase: 'download', bytes_done: 5 * MiB, bytes_total: 10 * MiB, eta_s: 1 });
  });

  it('keeps reporting while no bytes come: the rate falls, the eta grows, the log says so; and stops on finish', () => {
    const { m, reports, records } = meter();
    m.start('download', 100 * MiB);
    vi.advanceTimersByTime(1000);
    m.add(10 * MiB);
    vi.advanceTimersByTime(9000);
    expect(reports.at(-1)).toEqual({
      phase: 'download',
      bytes_done: 10 * MiB,
      bytes_total: 100 * MiB,
      rate_bps: 1 * MiB,
      eta_s: 90,
    });
    expect(records().map((r) => r.msg)).toContain('image download: 10.0 MiB of 100.0 MiB at 1.0 MiB/s, eta 90 s');
    m.add(10 * MiB);
    expect(reports.at(-1)).toMatchObject({ bytes_done: 20 * MiB });
    m.finish();
    const count = reports.length;
    vi.advanceTimersByTime(10_000);
    expect(reports.length).toBe(count);

    // A phase that counts no bytes stays quiet between its start and end lines.
    const quiet = meter();
    quiet.m.start('verify', null);
    vi.advanceTimersByTime(10_000);
    expect(quiet.reports).toHaveLength(1);
    expect(quiet.records().map((r) => r.msg)).toEqual(['image verify started']);
    quiet.m.finish();
  });

  it('logs nothing on finish when no phase ran', () => {
    const { m, ended } = meter();
    m.finish();
    expect(ended()).toEqual([]);
  });
});
