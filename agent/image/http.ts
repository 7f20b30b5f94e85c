// One HTTP exchange for an image, a checksum file or a config drive, and what its answer says: the
// headers, a Retry-After pause, whether a 206 still belongs to the first answer, the start of an error
// body. No loop and no sleep here: transfer.ts owns every retry decision.
import { createBrotliDecompress, createGunzip, createInflate } from 'node:zlib';
import { pipeline, Readable } from 'node:stream';
import { ImageDownloadError } from '../errors.ts';
import type { Dispatchers } from './dispatchers.ts';
import { get, type Response } from './http-body.ts';
import { splitCredentials } from './url-credentials.ts';

export type { Response };

const MAX_ERROR_BODY = 300;
/** The longest pause a server's Retry-After may impose between two attempts. */
const MAX_RETRY_AFTER_MS = 60_000;

export function header(res: Response, name: string): string | undefined {
  const v = res.headers[name];
  return Array.isArray(v) ? v[0] : v;
}

/** The pause a 429 or 503 asks for (Retry-After in seconds or as a date, read at `now`), capped; 0 when none. */
export function retryAfterMs(res: Response, now: number): number {
  if (res.statusCode !== 429 && res.statusCode !== 503) return 0;
  const value = header(res, 'retry-after')?.trim();
  if (!value) return 0;
  const ms = /^\d+$/.test(value) ? Number(value) * 1000 : Date.parse(value) - now;
  return Number.isFinite(ms) ? Math.min(Math.max(0, ms), MAX_RETRY_AFTER_MS) : 0;
}

/**
 * Reads `body` up to `max` bytes, then `drop`s it (which must end the transfer). Past `max`, `tooLong` decides:
 * null keeps what was read (an error message's excerpt); an error is thrown.
 */
export async function readBounded(
  body: AsyncIterable<Buffer>,
  drop: () => void,
  max: number,
  tooLong: () => Error | null,
): Promise<Buffer> {
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of body) {
      chunks.push(chunk);
      size += chunk.length;
      if (size > max) {
        const err = tooLong();
        if (err) throw err;
        break;
      }
    }
  } finally {
    drop();
  }
  return Buffer.concat(chunks);
}

/** The start of an unwanted answer's body, for the error message; the rest (a whole image, maybe) is never read. */
export async function errorExcerpt(res: Response): Promise<string> {
  const bytes = await readBounded(
    res.body,
    () => res.body.destroy(),
    MAX_ERROR_BODY,
    () => null,
  ).catch(() => Buffer.alloc(0));
  const text = bytes.toString('utf8');
  return text.length > MAX_ERROR_BODY ? `${text.slice(0, MAX_ERROR_BODY)}…` : text;
}

/**
 * Why a 206 answering a resume belongs to another version of the image than the first response, or null.
 * If-Range alone would do, but a server or cache that ignores it would splice two versions together, and
 * the mix would only surface as a checksum mismatch after the whole transfer.
 */
export function entityChange(first: Response, partial: Response, total: string, totalBytes: number): string | null {
  if (total !== '*' && Number(total) !== totalBytes) return `its length is now ${total} bytes, was ${totalBytes}`;
  for (const name of ['etag', 'last-modified']) {
    const before = header(first, name);
    const now = header(partial, name);
    if (before !== undefined && now !== undefined && before !== now) return `${name} ${now}, was ${before}`;
  }
  // RFC 9110 has a 206 repeat the ETag a 200 would carry; one that drops a strong ETag cannot be matched.
  const etag = header(first, 'etag');
  if (etag !== undefined && !etag.startsWith('W/') && header(partial, 'etag') === undefined)
    return 'the partial answer carries no etag';
  return null;
}

/** A 4xx that asking again cannot change (408 and 429 can). */
export function isFinalStatus(status: number): boolean {
  return status >= 400 && status < 500 && status !== 408 && status !== 429;
}

/**
 * The content-coding of an answer, when it has one. The agent asks for `identity`, but a server may encode
 * anyway; IPA's HTTP client decodes gzip, deflate (and br where it can), and the checksum covers the decoded
 * bytes, so ours must.
 */
export type ContentCoding = 'gzip' | 'deflate' | 'br';

export function contentCoding(res: Response): ContentCoding | null {
  const coding = header(res, 'content-encoding')?.trim().toLowerCase();
  if (!coding || coding === 'identity') return null;
  if (coding === 'gzip' || coding === 'x-gzip') return 'gzip';
  if (coding === 'deflate' || coding === 'br') return coding;
  throw new ImageDownloadError(
    `the server sent the body with Content-Encoding ${coding}, which the agent cannot decode`,
    { restartable: false },
  );
}

/** Undoes a content-coding over the (already resumed and spliced) wire body. */
const DECODERS = { gzip: createGunzip, deflate: createInflate, br: createBrotliDecompress };

export function decodeContent(
  coding: ContentCoding,
  wire: AsyncIterable<Buffer>,
): AsyncIterable<Buffer> & { destroy(): void } {
  const decoder = DECODERS[coding]();
  // pipeline carries a broken download into the decoder (and a consumer that stops back to the download).
  pipeline(Readable.from(wire, { objectMode: false }), decoder, () => undefined);
  return decoder;
}

/** Sends one GET with the image's authorization through the dispatcher its URL calls for. */
export class ImageHttp {
  constructor(
    private readonly dispatchers: Dispatchers,
    private readonly authorization: string | undefined,
    private readonly signal: AbortSignal | undefined,
  ) {}

  get(url: string, extra: Record<string, string> = {}): Promise<Response> {
    const target = splitCredentials(url);
    const headers: Record<string, string> = { 'accept-encoding': 'identity', ...extra };
    // image_info's own authorization (image_server_auth_strategy) wins over credentials in the URL.
    const authorization = this.authorization ?? target.authorization;
    if (authorization) headers.authorization = authorization;
    return get(this.dispatchers.forUrl(new URL(target.url)), target.url, headers, this.signal);
  }
}
