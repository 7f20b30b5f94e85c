// Progress of a long operation (an image deploy, a disk erase): the RUNNING command's `command_result`
// (throttled) and a log line every few seconds, also while no bytes move, so that a stall shows as one.
import type { Logger } from './log.ts';

export interface ProgressReport {
  /** What the phase works on, e.g. `{device, pass, passes}` for an erase. */
  [context: string]: unknown;
  phase: string;
  bytes_done: number;
  bytes_total: number | null;
  rate_bps: number;
  eta_s: number | null;
}

const REPORT_EVERY_MS = 500;
const LOG_EVERY_MS = 5000;
/** How often a phase that moved no bytes lately still reports. */
const IDLE_REPORT_MS = 1000;
const MiB = 1024 * 1024;

export class ProgressMeter {
  private phase = 'starting';
  private context: Record<string, string | number> = {};
  /** Facts that hold for the rest of the operation, whatever the phase (remark). */
  private lasting: Record<string, string | number> = {};
  private done = 0;
  private total: number | null = null;
  private phaseStart = Date.now();
  private lastReport = 0;
  private lastLog = Date.now();
  private running = false;
  private ticker?: NodeJS.Timeout;

  constructor(
    private readonly report: (r: ProgressReport) => void,
    private readonly log: Logger,
    /** Names the operation in log lines. */
    private readonly subject = 'image',
  ) {}

  start(phase: string, total: number | null, context: Record<string, string | number> = {}): void {
    this.finish();
    this.running = true;
    this.phase = phase;
    this.context = context;
    this.done = 0;
    this.total = total;
    this.phaseStart = Date.now();
    this.lastLog = this.phaseStart;
    this.ticker = setInterval(() => this.idle(), IDLE_REPORT_MS).unref();
    const size = total !== null ? ` (${(total / MiB).toFixed(1)} MiB)` : '';
    this.log.info(
      { ...this.lasting, ...context, phase, bytes_total: total },
      `${this.subject} ${phase} started${size}`,
    );
    this.emit(true);
  }

  /**
   * Logs how long the current phase took, so that a slow deploy or erase shows where its time went; starting
   * the next phase does the same.
   */
  finish(): void {
    if (!this.running) return;
    this.running = false;
    clearInterval(this.ticker);
    const snap = this.snapshot();
    const phaseS = Number(((Date.now() - this.phaseStart) / 1000).toFixed(3));
    const moved = snap.bytes_done > 0 ? ` (${formatProgress({ ...snap, bytes_total: null, eta_s: null })})` : '';
    this.log.info(
      { ...this.context, phase: this.phase, phase_s: phaseS, bytes_done: snap.bytes_done },
      `${this.subject} ${this.phase} took ${phaseS} s${moved}`,
    );
  }

  /** A fact that holds from now on (why a deploy left its route): in every later report and phase log line. */
  remark(context: Record<string, string | number>): void {
    this.lasting = { ...this.lasting, ...context };
    this.emit(true);
  }

  /** The total, once known after the phase started (a download's length comes with the response). */
  setTotal(total: number | null): void {
    this.total = total;
    this.emit(true);
  }

  add(bytes: number): void {
    this.done += bytes;
    this.emit(false);
  }

  set(bytes: number): void {
    this.done = bytes;
    this.emit(false);
  }

  snapshot(): ProgressReport {
    const seconds = (Date.now() - this.phaseStart) / 1000;
    const rate = seconds > 0 ? Math.round(this.done / seconds) : 0;
    const eta = this.total !== null && rate > 0 ? Math.max(0, Math.round((this.total - this.done) / rate)) : null;
    return {
      ...this.lasting,
      ...this.context,
      phase: this.phase,
      bytes_done: this.done,
      bytes_total: this.total,
      rate_bps: rate,
      eta_s: eta,
    };
  }

  /** Reports to the command result; logs only every LOG_EVERY_MS (phase starts and ends log on their own). */
  private emit(force: boolean): void {
    const now = Date.now();
    if (!force && now - this.lastReport < REPORT_EVERY_MS) return;
    this.lastReport = now;
    this.publish(now);
  }

  /**
   * The timer's report when bytes stopped coming: the average rate falls and the eta grows as time passes.
   * It leaves the byte-driven throttle alone, so the next bytes are reported at once. A phase that counts no
   * bytes (choosing the device, waiting for the checksum) would only repeat zeros, as if it had stalled.
   */
  private idle(): void {
    const now = Date.now();
    if (this.done === 0 && this.total === null) return;
    if (now - this.lastReport >= IDLE_REPORT_MS) this.publish(now);
  }

  private publish(now: number): void {
    const snap = this.snapshot();
    this.report(snap);
    if (now - this.lastLog >= LOG_EVERY_MS) {
      this.lastLog = now;
      this.log.info(snap, `${this.subject} ${snap.phase}: ${formatProgress(snap)}`);
    }
  }
}

export function formatProgress(r: ProgressReport): string {
  const done = `${(r.bytes_done / MiB).toFixed(1)} MiB`;
  const of = r.bytes_total !== null ? ` of ${(r.bytes_total / MiB).toFixed(1)} MiB` : '';
  const eta = r.eta_s !== null ? `, eta ${r.eta_s} s` : '';
  return `${done}${of} at ${(r.rate_bps / MiB).toFixed(1)} MiB/s${eta}`;
}
