// The one owner of every retry decision of a transfer, all on the injected Clock: which URL next and how
// often (each URL `retries + 1` times, the next URL after any error), how long to pause (the retry interval
// or a server's Retry-After, never past the deadline), resuming a broken body with Range + If-Range, and
// starting the whole attempt again from byte zero (a broken body that cannot resume, a checksum mismatch
// with a new digest). Errors say what a decision needs as fields (`restartable`, `actual`): see
// docs/architecture.md for the rules and why.
import type { Clock } from '../clock.ts';
import {
  ImageChecksumError,
  ImageDownloadError,
  ImageDownloadFatalError,
  ImageDownloadTimeoutError,
  ImageWriteError,
  errorText,
} from '../errors.ts';
import type { Logger } from '../log.ts';
import type { Dispatchers } from './dispatchers.ts';
import {
  contentCoding,
  decodeContent,
  entityChange,
  errorExcerpt,
  header,
  ImageHttp,
  isFinalStatus,
  readBounded,
  retryAfterMs,
  type Response,
} from './http.ts';
import { shownUrl } from './url-credentials.ts';

export interface TransferPolicy {
  retries: number;
  retryIntervalMs: number;
  /** How long the whole transfer may take, retries included (0: no limit). */
  maxDurationMs: number;
  authorization?: string;
  log: Logger;
  clock: Clock;
  /** The command was cancelled: whatever is in flight or waiting stops at once, and nothing is retried. */
  cancel?: AbortSignal;
}

export interface OpenedImage {
  /** The URL that answered, as logs and errors may show it (without credentials). */
  url: string;
  /** The body's length as the server declared it; unknown when the body is content-encoded. */
  totalBytes?: number;
  /**
   * The image's bytes: resumed across breaks and decoded from any content-coding. A plain async iterable, not a
   * stream: every layer costs each of a GiB's 16,000 chunks (docs/performance.md).
   */
  body: AsyncIterable<Buffer>;
  /** Abandons the download before (or while) its body is read. */
  cancel(): void;
}

/** Bytes a resumed answer must deliver before a later break gets a fresh budget of resume attempts. */
const RESUME_PROGRESS = 1024 * 1024;
const MAX_TEXT_BYTES = 1024 * 1024;
/** Runs of a step that failed for want of memory. */
const STEP_ATTEMPTS = 3;

export class Transfer {
  private readonly http: ImageHttp;
  /** Clock time after which the transfer gives up for good (0: never). */
  private readonly deadline: number;

  constructor(
    dispatchers: Dispatchers,
    private readonly policy: TransferPolicy,
  ) {
    const { clock, maxDurationMs } = policy;
    this.deadline = maxDurationMs > 0 ? clock.now() + maxDurationMs : 0;
    // Aborts whatever is in flight when the deadline passes, stalled transfers included.
    const signals = [policy.cancel, maxDurationMs > 0 ? clock.timeout(maxDurationMs) : undefined].filter(
      (s) => s !== undefined,
    );
    this.http = new ImageHttp(
      dispatchers,
      policy.authorization,
      signals.length > 0 ? AbortSignal.any(signals) : undefined,
    );
  }

  /**
   * Runs `attempt` until it succeeds or a failure cannot be helped by starting again from byte zero:
   * at most `retries + 1` attempts, pausing the retry interval between them.
   */
  async run<T>(attempt: () => Promise<T>): Promise<T> {
    const wrongDigests = new Set<string>();
    for (let n = 0; ; n++) {
      try {
        return await attempt();
      } catch (err) {
        if (this.policy.cancel?.aborted || !this.restartable(err, wrongDigests) || n >= this.policy.retries) throw err;
        this.policy.log.warn(
          { attempt: n, err: errorText(err) },
          'image transfer failed, starting again from byte zero',
        );
        await this.pause(this.policy.retryIntervalMs);
        this.checkDeadline();
      }
    }
  }

  /**
   * Runs a step that needs no download (qemu-img over the buffer file) again at once when it failed for want
   * of a resource (`transient`), at most `STEP_ATTEMPTS` times; `step` opens a fresh sink each time.
   */
  async repeat<T>(step: () => Promise<T>): Promise<T> {
    for (let n = 1; ; n++) {
      try {
        return await step();
      } catch (err) {
        if (this.policy.cancel?.aborted || !(err instanceof ImageWriteError && err.transient) || n >= STEP_ATTEMPTS)
          throw err;
        this.policy.log.warn({ attempt: n, err: errorText(err) }, 'a tool ran out of memory, running it again');
      }
    }
  }

  /**
   * Whether a fresh attempt may fix `err`: a broken transfer that did not already use up its retries, or a
   * checksum mismatch whose digest is new (bytes damaged on the way). The same wrong digest twice means the
   * server serves exactly those bytes; IPA downloads again on every mismatch, as often as it has retries.
   */
  private restartable(err: unknown, wrongDigests: Set<string>): boolean {
    if (err instanceof ImageChecksumError && err.actual !== undefined) {
      const fresh = !wrongDigests.has(err.actual);
      wrongDigests.add(err.actual);
      return fresh;
    }
    return err instanceof ImageDownloadError && err.restartable;
  }

  /** Sleeps between attempts, never past the deadline. */
  private async pause(ms: number): Promise<void> {
    const left = this.deadline > 0 ? Math.max(0, this.deadline - this.policy.clock.now()) : ms;
    await this.policy.clock.sleep(Math.min(ms, left), this.policy.cancel);
    this.policy.cancel?.throwIfAborted();
  }

  private checkDeadline(): void {
    this.policy.cancel?.throwIfAborted();
    if (this.deadline > 0 && this.policy.clock.now() > this.deadline) {
      throw new ImageDownloadTimeoutError('The image download did not finish within ipa-image-download-max-duration');
    }
  }

  /**
   * The first 200 from `urls`, in order. Each URL is asked `retries + 1` times; a final answer (a 4xx other
   * than 408 and 429) is not asked again, and any failure moves on to the next URL, as IPA does. When every
   * URL failed, the error lists what each one answered last.
   */
  private async firstResponse(urls: readonly string[], what: string): Promise<{ url: string; res: Response }> {
    const answers: string[] = [];
    let allFinal = true;
    for (const url of urls) {
      const shown = shownUrl(url);
      let asked = 0;
      let last = '';
      let final = false;
      for (let attempt = 0; attempt <= this.policy.retries && !final; attempt++) {
        if (attempt > 0) await this.pause(Math.max(this.policy.retryIntervalMs, asked));
        asked = 0;
        this.checkDeadline();
        let res: Response;
        try {
          res = await this.http.get(url);
        } catch (err) {
          this.checkDeadline();
          last = errorText(err);
          this.policy.log.warn({ url: shown, attempt, err: last }, `${what} request failed`);
          continue;
        }
        if (res.statusCode === 200) return { url, res };
        last = `received status code ${res.statusCode}, expected 200. Response body: ${await errorExcerpt(res)}`;
        final = isFinalStatus(res.statusCode);
        asked = retryAfterMs(res, Date.now());
        this.policy.log.warn(
          { url: shown, attempt, status: res.statusCode, retry_after_ms: asked || undefined },
          `${what} request failed`,
        );
      }
      allFinal &&= final;
      answers.push(`${shown}: ${last}`);
    }
    const text = `${what} failed from every URL:\n ${answers.join('\n ')}`;
    throw allFinal ? new ImageDownloadFatalError(text) : new ImageDownloadError(text, { restartable: false });
  }

  /** A small text document (a checksum file), limited to 1 MiB. */
  async text(url: string, what: string): Promise<string> {
    const opened = await this.open([url], what);
    const tooLong = () => new ImageDownloadFatalError(`${what} from ${shownUrl(url)} is larger than 1 MiB`);
    try {
      return (await readBounded(opened.body, opened.cancel, MAX_TEXT_BYTES, tooLong)).toString('utf8');
    } catch (err) {
      this.checkDeadline();
      if (err instanceof ImageDownloadError) throw err;
      throw new ImageDownloadError(`${what} from ${shownUrl(url)} broke: ${errorText(err)}`);
    }
  }

  /** Opens the image: resolves once a server answered 200, with a body that resumes where it can. */
  async open(urls: readonly string[], what = 'Image download'): Promise<OpenedImage> {
    const { url, res } = await this.firstResponse(urls, what);
    let coding: ReturnType<typeof contentCoding>;
    try {
      coding = contentCoding(res);
    } catch (err) {
      res.body.destroy();
      throw err;
    }
    const length = header(res, 'content-length');
    const wireBytes = length !== undefined && /^\d+$/.test(length) ? Number(length) : undefined;
    // Ranges and lengths count the encoded bytes: the resume works below the decoder, which never notices.
    // The answer being read: a resume replaces it, and cancelling destroys whichever it is, which ends a read
    // in progress at once (a generator's return would wait for that read).
    const current = { res, cancelled: false };
    const wire = this.resumingBody(url, current, wireBytes);
    const decoded = coding ? decodeContent(coding, wire) : null;
    const body = decoded ?? wire;
    const cancel = () => {
      current.cancelled = true;
      current.res.body.destroy();
      decoded?.destroy();
    };
    return { url: shownUrl(url), totalBytes: coding ? undefined : wireBytes, body, cancel };
  }

  private async *resumingBody(
    url: string,
    current: { res: Response; cancelled: boolean },
    totalBytes: number | undefined,
  ): AsyncGenerator<Buffer> {
    const first = current.res;
    const etag = header(first, 'etag');
    const validator = etag && !etag.startsWith('W/') ? etag : header(first, 'last-modified');
    const resumable =
      header(first, 'accept-ranges')?.toLowerCase() === 'bytes' && !!validator && totalBytes !== undefined;
    let res = first;
    let chunks = res.body[Symbol.asyncIterator]();
    let offset = 0;
    let breaks = 0;
    let resumedAt = 0;
    try {
      for (;;) {
        let next: IteratorResult<Buffer>;
        try {
          next = await chunks.next();
          if (next.done && totalBytes !== undefined && offset !== totalBytes) {
            throw new Error(`the body ended after ${offset} of ${totalBytes} bytes`);
          }
        } catch (err) {
          // Abandoned by its reader (cancel), not broken: nothing to resume.
          if (current.cancelled) throw err;
          this.checkDeadline();
          res.body.destroy();
          const why = `download from ${shownUrl(url)} broke at byte ${offset}: ${errorText(err)}`;
          if (!resumable) throw new ImageDownloadError(`${why}; the server does not support resuming`);
          this.policy.log.warn({ url: shownUrl(url), offset, err: errorText(err) }, 'image download broke, resuming');
          ({ res, breaks } = await this.resume(url, first, totalBytes!, offset, validator!, why, breaks));
          current.res = res;
          // Cancelled while the resume was asked for: this answer is dropped too, and the next read ends it all.
          if (current.cancelled) res.body.destroy();
          chunks = res.body[Symbol.asyncIterator]();
          resumedAt = offset;
          continue;
        }
        if (next.done) return;
        this.checkDeadline();
        offset += next.value.length;
        // Counted per stretch of trouble, so that a long transfer over a link that drops now and then goes on.
        if (breaks > 0 && offset - resumedAt >= RESUME_PROGRESS) breaks = 0;
        // Outside the try: what the consumer throws in here (a sink giving up, the pipeline torn down) is not
        // a break of the download, and must not be answered with a resume or reported as one.
        yield next.value;
      }
    } finally {
      res.body.destroy();
    }
  }

  /**
   * A 206 continuing at `offset` of the same entity. Transport errors, 408, 429 and 5xx count as further breaks;
   * any other answer (the entity changed, ranges refused), or too many breaks, is a restartable error: a server
   * or proxy that fails Range requests may still serve the whole image.
   */
  private async resume(
    url: string,
    first: Response,
    totalBytes: number,
    offset: number,
    validator: string,
    why: string,
    breaks: number,
  ): Promise<{ res: Response; breaks: number }> {
    let asked = 0;
    for (;;) {
      this.checkDeadline();
      if (++breaks > this.policy.retries)
        throw new ImageDownloadError(`${why}; gave up after ${breaks - 1} resume attempts, starting over`);
      await this.pause(Math.max(this.policy.retryIntervalMs, asked));
      asked = 0;
      this.checkDeadline();
      let res: Response;
      try {
        res = await this.http.get(url, { range: `bytes=${offset}-`, 'if-range': validator });
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
      await errorExcerpt(res);
      if (res.statusCode >= 500 || res.statusCode === 408 || res.statusCode === 429) {
        asked = retryAfterMs(res, Date.now());
        continue;
      }
      throw new ImageDownloadError(
        `${why}; the server answered the resume with status ${res.statusCode}, starting over`,
      );
    }
  }
}
