// The agent's HTTP client for the Ironic API: IPA's headers, a per-request timeout, and the URL list
// (`ipa-api-url` may name several): on a connection error or timeout the next URL is tried, and the
// one that answered moves to the front, so later requests go there first.
import { readFileSync } from 'node:fs';
import { Agent as Dispatcher, request } from '../undici.ts';
import type { Logger } from '../log.ts';

export interface IronicApiOptions {
  urls: readonly string[];
  timeoutS: number;
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

/** No URL in the list answered at all (refused, reset, timed out). */
export class ConductorUnreachable extends Error {}

export class IronicApi {
  private urls: string[];
  private readonly dispatcher: Dispatcher;

  constructor(private readonly opts: IronicApiOptions) {
    this.urls = [...opts.urls];
    const timeout = opts.timeoutS * 1000;
    this.dispatcher = new Dispatcher({
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
    opts: { version?: string; body?: unknown; signal?: AbortSignal } = {},
  ): Promise<IronicReply> {
    const headers: Record<string, string> = { 'Content-Type': 'application/json', Accept: 'application/json' };
    if (opts.version) headers['X-OpenStack-Ironic-API-Version'] = opts.version;
    if (this.opts.requestId) headers['X-OpenStack-Request-ID'] = this.opts.requestId;
    const body = opts.body === undefined ? undefined : JSON.stringify(opts.body);
    let lastError: unknown;
    for (const base of [...this.urls]) {
      try {
        const res = await request(`${base}${path}`, {
          method,
          headers,
          body,
          dispatcher: this.dispatcher,
          signal: opts.signal,
        });
        const text = await res.body.text();
        this.urls = [base, ...this.urls.filter((u) => u !== base)];
        return { status: res.statusCode, text, base };
      } catch (err) {
        if (opts.signal?.aborted) throw err;
        lastError = err;
        this.opts.log.debug({ url: `${base}${path}`, err: describe(err) }, 'conductor did not answer');
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
    doc = JSON.parse(text);
  } catch {
    return text.trim();
  }
  let inner = (doc as { error_message?: unknown } | null)?.error_message;
  if (typeof inner === 'string') {
    const textual = inner;
    try {
      inner = JSON.parse(textual);
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
