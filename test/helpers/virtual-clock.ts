// Virtual time for the agent's retry loops: a sleep returns at once and moves the clock on by its length,
// and every pause is recorded, so fault tests assert the pauses instead of waiting them out. Deadlines
// (`timeout`) fire when the clock passes them: by sleeps, or by a test calling `advance`.
import type { Clock } from '../../agent/clock.ts';

export class VirtualClock implements Clock {
  /** Starts at the wall time, so that HTTP dates (Retry-After) read against it make sense. */
  private t = Date.now();
  /** Every sleep asked for, in order. */
  readonly sleeps: number[] = [];
  private readonly timers: { at: number; ctl: AbortController }[] = [];

  now(): number {
    return this.t;
  }

  async sleep(ms: number): Promise<void> {
    this.sleeps.push(ms);
    this.advance(ms);
    await new Promise((resolve) => setImmediate(resolve));
  }

  timeout(ms: number): AbortSignal {
    const ctl = new AbortController();
    this.timers.push({ at: this.t + ms, ctl });
    return ctl.signal;
  }

  advance(ms: number): void {
    this.t += Math.max(0, ms);
    for (const timer of this.timers) {
      if (timer.at <= this.t && !timer.ctl.signal.aborted)
        timer.ctl.abort(new DOMException('The deadline passed', 'TimeoutError'));
    }
  }
}
