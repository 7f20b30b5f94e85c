// The heartbeat loop, on IPA's schedule. After a 202 the next one is due in heartbeat_timeout ×
// U(0.3, 0.6); after any failure in 5 × U(1, 2) s. `force()` (an async command ended) makes one due as
// soon as more than 5 s have passed since the previous one, so pokes coalesce; the periodic ones go on
// regardless (a real conductor skips a heartbeat that hits a locked node). A 400 saying the token is
// invalid means the conductor wiped it (power action, end of deploy): reported as 'token-rejected'.
import { EventEmitter } from 'node:events';
import type { Logger } from '../log.ts';
import type { Clock } from '../clock.ts';
import { ironicFault, type IronicApi } from './ironic-api.ts';
import { V_AGENT_VERSION, V_TOKEN, V_VERIFY_CA, versionHeader } from './versions.ts';

const MAX_WAIT_MS = 5000;
const FORCED_GAP_MS = 5000;
const LOOP_PAUSE_MS = 100;
/**
 * A wake-up this close to the due time counts as due: sums of fractional milliseconds can land a hair
 * short of the interval, and the loop would then wait a whole LOOP_PAUSE_MS more.
 */
const DUE_SLACK_MS = 1;
const TOKEN_REJECTED = 'Invalid or missing agent token';

export interface HeartbeatTarget {
  nodeUuid: string;
  callbackUrl: string;
  /** The conductor's API version (minor): decides which body keys are sent. */
  version: number;
  /** lookup config.heartbeat_timeout. */
  heartbeatTimeoutS: number;
  agentVersion: string;
  token(): string | null;
  /** The auto-TLS certificate PEM, sent unchanged on every heartbeat. */
  verifyCa?: string;
}

/** The POST body, keys in IPA's order and included by version (`agent_token` even when null). */
export interface HeartbeatBody {
  callback_url: string;
  agent_token?: string | null;
  agent_version?: string;
  agent_verify_ca?: string;
}

export function heartbeatBody(t: HeartbeatTarget): HeartbeatBody {
  const body: HeartbeatBody = { callback_url: t.callbackUrl };
  if (t.version >= V_TOKEN) body.agent_token = t.token();
  if (t.version >= V_AGENT_VERSION) body.agent_version = t.agentVersion;
  if (t.version >= V_VERIFY_CA && t.verifyCa) body.agent_verify_ca = t.verifyCa;
  return body;
}

export interface BeatEvent {
  /** Clock time of the attempt (ms). */
  at: number;
  ok: boolean;
  /** HTTP status, absent when the conductor did not answer. */
  status?: number;
  /** Why it failed. */
  reason?: string;
  forced: boolean;
  /** The interval now in force (ms). */
  nextIntervalMs: number;
}

export interface HeartbeaterEvents {
  beat: [BeatEvent];
  'token-rejected': [string];
}

export class Heartbeater extends EventEmitter<HeartbeaterEvents> {
  private intervalMs = 0;
  private previous = 0;
  private forced = false;
  /** Counts pokes, so that one arriving while a heartbeat is in flight is not cleared by its 202. */
  private pokes = 0;
  private stopped = false;
  private wake = new AbortController();
  /** Ends a heartbeat request in flight when the loop stops. */
  private readonly halt = new AbortController();
  private running?: Promise<void>;

  constructor(
    private readonly target: HeartbeatTarget,
    private readonly deps: { api: IronicApi; clock: Clock; random: () => number; log: Logger },
  ) {
    super();
  }

  start(): void {
    this.running ??= this.loop();
  }

  /** Heartbeat early: an async command ended and the conductor should look at it. */
  force(): void {
    this.forced = true;
    this.pokes++;
    this.wake.abort();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.wake.abort();
    this.halt.abort();
    await this.running;
  }

  private dueIn(now: number): number {
    const since = now - this.previous;
    let due = this.intervalMs - since;
    if (this.forced) due = Math.min(due, FORCED_GAP_MS - since + 1);
    return Math.min(MAX_WAIT_MS, Math.max(0, due));
  }

  private async loop(): Promise<void> {
    const { clock } = this.deps;
    while (!this.stopped) {
      await clock.sleep(this.dueIn(clock.now()), this.wake.signal);
      if (this.wake.signal.aborted) this.wake = new AbortController();
      if (this.stopped) break;
      const since = clock.now() - this.previous;
      if (since >= this.intervalMs - DUE_SLACK_MS || (this.forced && since > FORCED_GAP_MS)) await this.beat();
      if (!this.stopped) await clock.sleep(LOOP_PAUSE_MS, this.wake.signal);
    }
  }

  private async beat(): Promise<void> {
    const { api, clock, random, log } = this.deps;
    const forced = this.forced;
    const pokes = this.pokes;
    const at = clock.now();
    let status: number | undefined;
    let reason: string | undefined;
    try {
      const reply = await api.send('POST', `/v1/heartbeat/${encodeURIComponent(this.target.nodeUuid)}`, {
        version: versionHeader(this.target.version, V_VERIFY_CA),
        body: heartbeatBody(this.target),
        signal: this.halt.signal,
        // One answered later than this is late anyway: the conductor expected the next heartbeat by then.
        withinMs: this.target.heartbeatTimeoutS * 1000,
      });
      status = reply.status;
      if (status !== 202) reason = ironicFault(reply.text);
    } catch (err) {
      reason = (err as Error).message;
    }
    if (this.stopped) return;
    const ok = status === 202;
    this.previous = clock.now();
    if (ok) {
      this.intervalMs = this.target.heartbeatTimeoutS * 1000 * (0.3 + 0.3 * random());
      if (this.pokes === pokes) this.forced = false;
    } else {
      this.intervalMs = 5000 * (1 + random());
      log.warn(
        { status, reason, retryInMs: Math.round(this.intervalMs) },
        status === 409 ? 'heartbeat conflict' : 'heartbeat failed',
      );
    }
    this.emit('beat', { at, ok, status, reason, forced, nextIntervalMs: this.intervalMs });
    if (status === 400 && reason?.includes(TOKEN_REJECTED)) this.emit('token-rejected', reason);
  }
}
