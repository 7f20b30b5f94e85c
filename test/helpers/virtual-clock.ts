// The tests' one virtual clock, for the agent's retry loops, lookup backoff and heartbeat schedule. A sleep that
// ends at or before the horizon (by default, any) returns at once and moves the clock on by its length; a later one
// waits until the test moves the horizon past it (`advanceTo`). Every sleep asked for is recorded, so tests assert
// the pauses instead of waiting them out. Deadlines (`timeout`) fire when the clock passes them.
import type { Clock } from '../../agent/clock.ts';

export interface VirtualClockOptions {
  /** The time it starts at; the wall time by default, so that HTTP dates (Retry-After) read against it make sense. */
  start?: number;
  /** Sleeps ending later than this wait for `advanceTo`; Infinity (the default) lets every sleep end at once. */
  horizon?: number;
}

export class VirtualClock implements Clock {
  private t: number;
  private horizon: number;
  /** Every sleep asked for, in order. */
  readonly sleeps: number[] = [];
  private readonly timers: { at: number; ctl: AbortController }[] = [];
  private parked: { until: number; resolve: () => void }[] = [];

  constructor({ start = Date.now(), horizon = Infinity }: VirtualClockOptions = {}) {
    this.t = start;
    this.horizon = horizon;
  }

  now(): number {
    return this.t;
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    this.sleeps.push(ms);
    const until = this.t + Math.max(0, ms);
    if (signal?.aborted) return Promise.resolve();
    if (until <= this.horizon) {
      this.moveTo(until);
      return new Promise((resolve) => setImmediate(resolve));
    }
    return new Promise((resolve) => {
      const entry = { until, resolve };
      this.parked.push(entry);
      signal?.addEventListener(
        'abort',
        () => {
          this.parked = this.parked.filter((p) => p !== entry);
          resolve();
        },
        { once: true },
      );
    });
  }

  timeout(ms: number): AbortSignal {
    const ctl = new AbortController();
    this.timers.push({ at: this.t + ms, ctl });
    return ctl.signal;
  }

  /** Moves the clock on by `ms`, firing the deadlines it passes. */
  advance(ms: number): void {
    this.moveTo(this.t + Math.max(0, ms));
  }

  /** Lets every sleep ending at or before `horizon` end, in the order they end, and later ones end at once. */
  advanceTo(horizon: number): void {
    this.horizon = horizon;
    const due = this.parked.filter((p) => p.until <= horizon).sort((a, b) => a.until - b.until);
    this.parked = this.parked.filter((p) => p.until > horizon);
    for (const p of due) {
      this.moveTo(p.until);
      p.resolve();
    }
  }

  private moveTo(t: number): void {
    this.t = Math.max(this.t, t);
    for (const timer of this.timers) {
      if (timer.at <= this.t && !timer.ctl.signal.aborted)
        timer.ctl.abort(new DOMException('The deadline passed', 'TimeoutError'));
    }
  }
}
