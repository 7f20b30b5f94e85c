// Image downloads over HTTP(S): retries with a fixed interval, fallback across the image's URLs, a
// stall timeout, an overall deadline, and resume. When a transfer breaks and the server offered byte
// ranges with a validator (ETag or Last-Modified), the body continues from the byte reached with Range +
// If-Range, so whatever consumes it (hash, decompressor, disk) never notices. Otherwise the body fails
// with a retryable ImageDownloadError and the caller starts over from byte zero.
import { setTimeout as sleep } from 'node:timers/promises';
import { Readable } from 'node:stream';
import { request, type Dispatcher } from 'undici';
import { ImageDownloadError, ImageDownloadTimeoutError, errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Dispatchers } from './dispatchers.ts';
import { shownUrl, splitCredentials } from './url-credentials.ts';

/** A download error that no retry can fix (a 4xx other than 408/429). */
export class ImageDownloadFatalError extends ImageDownloadError {}

/**
 * Every URL has used up its retries. Starting the whole transfer again would only repeat them, (retries + 1)²
 * requests in all; the wire type stays IPA's ImageDownloadError.
 */
export class RetriesSpentError extends ImageDownloadError {
  static override wireType = ImageDownloadError.name;
}

export interface FetchPolicy {
  retries: number;
  retryIntervalMs: number;
  /** Epoch ms after which the download gives up for good (0: no deadline). */
  deadline: number;
  authorization?: string;
  log: Logger;
  /** The command was cancelled: whatever is in flight or waiting stops at once. */
  cancel?: AbortSignal;
}

export interface OpenedImage {
  /** The URL that answered, as logs and errors may show it (without credentials). */
  url: string;
  /** The body's length as the server declared it. */
  totalBytes?: number;
  body: Readable;
  /** Abandons the download before (or while) its body is read. */
  cancel(): void;
}

type Response = Dispatcher.ResponseData;

const MAX_ERROR_BODY = 300;
/** The longest pause a server's Retry-After may impose between two attempts. */
const MAX_RETRY_AFTER_MS = 60_000;
/** Bytes a resumed answer must deliver before a later break gets a fresh budget of resume attempts. */
const RESUME_PROGRESS = 1024 * 1024;

function header(res: Response, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The pause a 429 or 503 asks for (Retry-After in seconds or as a date), capped; 0 when it asks none. */
function retryAfterMs(res: Response): number {
  if (res.statusCode !== 429 && res.statusCode !== 503) return 0;
  const value = header(res, 'retry-after')?.trim();
  if (!value) return 0;
  const ms = /^\d+$/.test(value) ? Number(value) * 1000 : Date.parse(value) - Date.now();
  return Number.isFinite(ms) ? Math.min(Math.max(0, ms), MAX_RETRY_AFTER_MS) : 0;
}

/** The start of an unwanted answer's body, for the error message; the rest (a whole image, maybe) is never read. */
async function drain(res: Response): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of res.body) {
      chunks.push(chunk as Buffer);
      size += (chunk as Buffer).length;
      if (size > MAX_ERROR_BODY) break;
    }
  } catch {
    return '';
  } finally {
    res.body.destroy();
  }
  const text = Buffer.concat(chunks).toString('utf8');
  return text.length > MAX_ERROR_BODY ? `${text.slice(0, MAX_ERROR_BODY)}…` : text;
}

/**
 * Why a 206 answering a resume belongs to another version of the image than the first response, or null.
 * If-Range alone would do, but a server or cache that ignores it would splice two versions together, and
 * the mix would only surface as a checksum mismatch after the whole transfer.
 */
function entityChange(first: Response, partial: Response, total: string, totalBytes: number): string | null {
  if (total !== '*' && Number(total) !== totalBytes) return `its length is now ${total} bytes, was ${totalBytes}`;
  for (const name of ['etag', 'last-modified']) {
    const before = header(first, name);
    const now = header(partial, name);
    if (before !== undefined && now !== undefined && before !== now) return `${name} ${now}, was ${before}`;
  }
  // RFC 9110 has a 206 repeat the ETag a 200 would carry; one that drops a strong ETag cannot be matched.
  const etag = header(first, 'etag');
  if (etag !== undefined && !etag.startsWith('W/') && header(partial, 'etag') === undefined) return 'the partial answer carries no etag';
  return null;
}

export class ImageFetcher {
  /** Aborts whatever is in flight when the overall deadline passes, stalled transfers included. */
  private readonly signal?: AbortSignal;

  constructor(
    private readonly dispatchers: Dispatchers,
    private readonly policy: FetchPolicy,
  ) {
    const signals = [policy.cancel, policy.deadline > 0 ? AbortSignal.timeout(Math.max(1, policy.deadline - Date.now())) : undefined];
    const present = signals.filter((s): s is AbortSignal => s !== undefined);
    if (present.length > 0) this.signal = AbortSignal.any(present);
  }

  /** Sleeps between attempts, never past the overall deadline. */
  private async pause(ms: number): Promise<void> {
    const left = this.policy.deadline > 0 ? Math.max(0, this.policy.deadline - Date.now()) : ms;
    await sleep(Math.min(ms, left), undefined, { signal: this.policy.cancel });
  }

  private checkDeadline(): void {
    this.policy.cancel?.throwIfAborted();
    if (this.policy.deadline > 0 && Date.now() > this.policy.deadline) {
      throw new ImageDownloadTimeoutError('The image download did not finish within ipa-image-download-max-duration');
    }
  }

  private async get(url: string, extra: Record<string, string> = {}): Promise<Response> {
    const target = splitCredentials(url);
    const headers: Record<string, string> = { 'accept-encoding': 'identity', ...extra };
    // image_info's own authorization (image_server_auth_strategy) wins over credentials in the URL.
    const authorization = this.policy.authorization ?? target.authorization;
    if (authorization) headers.authorization = authorization;
    return request(target.url, { method: 'GET', headers, dispatcher: this.dispatchers.forUrl(new URL(target.url)), signal: this.signal });
  }

  /**
   * The first good response from `urls`, in order, each tried `retries + 1` times. A 4xx other than 408
   * and 429 ends everything at once; 5xx and transport errors are retried, then the next URL is tried.
   */
  private async firstResponse(urls: readonly string[], what: string): Promise<{ url: string; res: Response }> {
    const failures: string[] = [];
    for (const url of urls) {
      const shown = shownUrl(url);
      let asked = 0;
      for (let attempt = 0; attempt <= this.policy.retries; attempt++) {
        if (attempt > 0) await this.pause(Math.max(this.policy.retryIntervalMs, asked));
        asked = 0;
        this.checkDeadline();
        let res: Response;
        try {
          res = await this.get(url);
        } catch (err) {
          this.checkDeadline();
          failures.push(`${shown}: ${errorText(err)}`);
          this.policy.log.warn({ url: shown, attempt, err: errorText(err) }, `${what} request failed`);
          continue;
        }
        if (res.statusCode === 200) return { url, res };
        const text = `${shown}: received status code ${res.statusCode}, expected 200. Response body: ${await drain(res)}`;
        if (res.statusCode >= 400 && res.statusCode < 500 && res.statusCode !== 408 && res.statusCode !== 429) {
          throw new ImageDownloadFatalError(`${what}: ${text}`);
        }
        failures.push(text);
        asked = retryAfterMs(res);
        this.policy.log.warn({ url: shown, attempt, status: res.statusCode, retry_after_ms: asked || undefined }, `${what} request failed`);
      }
    }
    throw new RetriesSpentError(`${what} failed from every URL:\n ${failures.join('\n ')}`);
  }

  /** A small text document (a checksum file), limited to 1 MiB. */
  async text(url: string, what: string): Promise<string> {
    const { res } = await this.firstResponse([url], what);
    const chunks: Buffer[] = [];
    let size = 0;
    try {
      for await (const chunk of res.body) {
        size += (chunk as Buffer).length;
        if (size > 1024 * 1024) {
          res.body.destroy();
          throw new ImageDownloadFatalError(`${what} from ${shownUrl(url)} is larger than 1 MiB`);
        }
        chunks.push(chunk as Buffer);
      }
    } catch (err) {
      this.checkDeadline();
      if (err instanceof ImageDownloadError) throw err;
      throw new ImageDownloadError(`${what} from ${shownUrl(url)} broke: ${errorText(err)}`);
    }
    return Buffer.concat(chunks).toString('utf8');
  }

  /** Opens the image: resolves once a server answered 200, with a body that resumes where it can. */
  async open(urls: readonly string[]): Promise<OpenedImage> {
    const { url, res } = await this.firstResponse(urls, 'Image download');
    const length = header(res, 'content-length');
    const totalBytes = length !== undefined && /^\d+$/.test(length) ? Number(length) : undefined;
    const body = Readable.from(this.resumingBody(url, res, totalBytes), { objectMode: false });
    const cancel = () => {
      res.body.destroy();
      body.destroy();
    };
    return { url: shownUrl(url), totalBytes, body, cancel };
  }

  private async *resumingBody(url: string, first: Response, totalBytes: number | undefined): AsyncGenerator<Buffer> {
    const etag = header(first, 'etag');
    const validator = etag && !etag.startsWith('W/') ? etag : header(first, 'last-modified');
    const resumable = header(first, 'accept-ranges')?.toLowerCase() === 'bytes' && !!validator && totalBytes !== undefined;
    let res = first;
    let offset = 0;
    let breaks = 0;
    let resumedAt = 0;
    for (;;) {
      try {
        for await (const chunk of res.body) {
          this.checkDeadline();
          offset += (chunk as Buffer).length;
          // Counted per stretch of trouble, so that a long transfer over a link that drops now and then goes on.
          if (breaks > 0 && offset - resumedAt >= RESUME_PROGRESS) breaks = 0;
          yield chunk as Buffer;
        }
        if (totalBytes !== undefined && offset !== totalBytes) {
          throw new Error(`the body ended after ${offset} of ${totalBytes} bytes`);
        }
        return;
      } catch (err) {
        if (err instanceof ImageDownloadTimeoutError) throw err;
        this.checkDeadline();
        res.body.destroy();
        const why = `download from ${shownUrl(url)} broke at byte ${offset}: ${errorText(err)}`;
        if (!resumable) throw new ImageDownloadError(`${why}; the server does not support resuming`);
        this.policy.log.warn({ url: shownUrl(url), offset, err: errorText(err) }, 'image download broke, resuming');
        ({ res, breaks } = await this.resume(url, first, totalBytes!, offset, validator!, why, breaks));
        resumedAt = offset;
      }
    }
  }

  /**
   * A 206 continuing at `offset` of the same entity. Transport errors, 408, 429 and 5xx count as further breaks;
   * any other answer (the entity changed, ranges refused), or too many breaks, is a retryable error to start
   * over: a server or proxy that fails Range requests may still serve the whole image.
   */
  private async resume(url: string, first: Response, totalBytes: number, offset: number, validator: string, why: string, breaks: number): Promise<{ res: Response; breaks: number }> {
    let asked = 0;
    for (;;) {
      this.checkDeadline();
      if (++breaks > this.policy.retries) throw new ImageDownloadError(`${why}; gave up after ${breaks - 1} resume attempts, starting over`);
      await this.pause(Math.max(this.policy.retryIntervalMs, asked));
      asked = 0;
      this.checkDeadline();
      let res: Response;
      try {
        res = await this.get(url, { range: `bytes=${offset}-`, 'if-range': validator });
      } catch (err) {
        this.policy.log.warn({ url: shownUrl(url), offset, err: errorText(err) }, 'resume request failed');
        continue;
      }
      const range = /^bytes (\d+)-\d+\/(\d+|\*)$/i.exec(header(res, 'content-range') ?? '');
      if (res.statusCode === 206 && range && Number(range[1]) === offset) {
        const changed = entityChange(first, res, range[2]!, totalBytes);
        if (!changed) return { res, breaks };
        res.body.destroy();
        throw new ImageDownloadError(`${why}; the image on the server changed (${changed}), starting over`);
      }
      await drain(res);
      if (res.statusCode >= 500 || res.statusCode === 408 || res.statusCode === 429) {
        asked = retryAfterMs(res);
        continue;
      }
      throw new ImageDownloadError(`${why}; the server answered the resume with status ${res.statusCode}, starting over`);
    }
  }
}
