// The agent's HTTP client for the Ironic API (and the inspection callback): IPA's headers, one deadline
// for each whole exchange, a cap on the reply, and the URL list (`ipa-api-url` may name several): on a
// connection error, a passed deadline or an oversized reply the next URL is tried, and the one that
// answered moves to the front, so later requests go there first.
import { readFileSync } from 'node:fs';
import { BodyOverCap, parseBoundedJson, readCapped } from '../bounded-json.ts';
import { realClock, type Clock } from '../clock.ts';
import { Agent as Dispatcher, request } from '../undici.ts';
import type { Logger } from '../log.ts';

/**
 * Ironic's replies are small: a lookup carries the node's (masked) properties, instance_info and
 * driver_internal_info, an error a faultstring, a heartbeat nothing. A reply past this is refused.
 */
export const MAX_REPLY_BYTES = 4 * 1024 * 1024;

export interface IronicApiOptions {
  urls: readonly string[];
  /**
   * The deadline of one exchange with one URL, connection, headers and body together, on `clock`: a
   * reply that trickles in is cut off there, however steadily its bytes come.
   */
  timeoutS: number;
  clock?: Clock;
  requestId?: string;
  /** Skip verification of an https Ironic API (ipa-insecure). */
  insecure: boolean;
  /** CA bundle for an https Ironic API (ipa-cafile). */
  caFile?: string;
  log: Logger;
}

export interface IronicReply {
  status: number;
  text: string;
  /** The base URL that answered. */
  base: string;
}

/** No URL in the list gave a usable answer (refused, reset, past the deadline, larger than the cap). */
export class ConductorUnreachable extends Error {}

export class IronicApi {
  private urls: string[];
  private readonly dispatcher: Dispatcher;
  private readonly clock: Clock;

  constructor(private readonly opts: IronicApiOptions) {
    this.urls = [...opts.urls];
    this.clock = opts.clock ?? realClock;
    const timeout = opts.timeoutS * 1000;
    this.dispatcher = new Dispatcher({
      // Idle timeouts on real time, besides the deadline: a safety net should the clock be stopped.
      headersTimeout: timeout,
      bodyTimeout: timeout,
      // HTTP/1.1, as IPA speaks to Ironic (undici 8 would offer h2 to an HTTPS API).
      allowH2: false,
      connect: {
        timeout,
        rejectUnauthorized: !opts.insecure,
        ...(opts.caFile ? { ca: readFileSync(opts.caFile, 'utf8') } : {}),
      },
    });
  }

  /** The URL that answered last (the first one before any request). */
  get current(): string {
    return this.urls[0]!;
  }

  /** Sends one request; any HTTP answer is returned, whatever its status. */
  async send(
    method: 'GET' | 'POST',
    path: string,
    /** `withinMs`: a caller's own time left (an overall timeout) for all the URLs, when shorter than a deadline. */
    opts: { version?: string; body?: unknown; signal?: AbortSignal; withinMs?: number } = {},
  ): Promise<IronicReply> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json', Accept: 'application/json' };
    if (opts.version) headers['X-OpenStack-Ironic-API-Version'] = opts.version;
    if (this.opts.requestId) headers['X-OpenStack-Request-ID'] = this.opts.requestId;
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    let lastError: unknown;
    const end = this.clock.now() + (opts.withinMs ?? Number.POSITIVE_INFINITY);
    const urls = [...this.urls];
    for (const [i, base] of urls.entries()) {
      // Aborting the request ends it whatever stage it is at: undici destroys the socket and the body.
      // Within a caller's budget each URL gets its share of what is left, so a first one that hangs does not
      // leave the others a millisecond.
      const share = (end - this.clock.now()) / (urls.length - i);
      const ms = Math.max(1, Math.min(this.opts.timeoutS * 1000, share));
      const deadline = this.clock.timeout(ms);
      const signal = opts.signal ? AbortSignal.any([opts.signal, deadline]) : deadline;
      try {
        signal.throwIfAborted();
        const res = await request(`${base}${path}`, { method, headers, body, dispatcher: this.dispatcher, signal });
        if (Number(res.headers['content-length']) > MAX_REPLY_BYTES) {
          res.body.destroy();
          throw new BodyOverCap(MAX_REPLY_BYTES);
        }
        const text = (await readCapped(res.body, MAX_REPLY_BYTES)).toString('utf8');
        this.urls = [base, ...this.urls.filter((u) => u !== base)];
        return { status: res.statusCode, text, base };
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        lastError = deadline.aborted
          ? new Error(`timeout: no whole reply within ${ms / 1000} s`)
          : err instanceof BodyOverCap
            ? new Error(`reply larger than ${err.cap} bytes, not read further`)
            : err;
        this.opts.log.debug({ url: `${base}${path}`, err: describe(lastError) }, 'conductor did not answer');
      }
    }
    throw new ConductorUnreachable(`no answer from ${this.urls.join(', ')}: ${describe(lastError)}`);
  }

  /** Ends every connection at once (the link stops for good; nothing in flight matters any more). */
  close(): Promise<void> {
    return this.dispatcher.destroy();
  }
}

function describe(err: unknown): string {
  if (!(err instanceof Error)) return String(err);
  const code = (err as NodeJS.ErrnoException).code;
  const cause = err.cause instanceof Error ? `: ${err.cause.message}` : '';
  return `${code ? `${code} ` : ''}${err.message}${cause}`;
}

/**
 * The human text of an Ironic error body. Ironic wraps `{faultcode, faultstring, debuginfo}` as a JSON
 * *string* in `error_message` (some formats put an object there, maybe with a `title`); as IPA does,
 * take faultstring, then title, then the raw text.
 */
export function ironicFault(text: string): string {
  let doc: unknown;
  try {
    doc = parseBoundedJson(text);
  } catch {
    return text.trim();
  }
  let inner = (doc as { error_message?: unknown } | null)?.error_message;
  if (typeof inner === 'string') {
    const textual = inner;
    try {
      inner = parseBoundedJson(textual);
    } catch {
      return textual;
    }
  }
  if (inner && typeof inner === 'object') {
    const { faultstring, title } = inner as { faultstring?: unknown; title?: unknown };
    if (typeof faultstring === 'string') return faultstring;
    if (typeof title === 'string') return title;
  }
  return text.trim();
}
