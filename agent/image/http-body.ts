// One GET through undici's dispatcher, its body read straight from the handler's callbacks. undici's own
// request() wraps the body in a stream: per 64 KiB chunk a stream push, two deferred ticks, an async
// context switch and a promise of its async iterator, on the main thread that also parses the image and
// feeds the disk; a GiB is 16,000 chunks (docs/performance.md). Here a chunk goes into a short queue that
// the reader takes from, and the download pauses (undici stops reading the socket) while the queue is full.
import type { IncomingHttpHeaders } from 'node:http';
import type { Dispatcher } from '../undici.ts';
import { markDownloaded } from './downloaded-chunks.ts';

/** A response to a GET: the status, the headers (names in lower case) and the body, read once. */
export interface Response {
  statusCode: number;
  headers: IncomingHttpHeaders;
  body: ResponseBody;
}

/**
 * What is queued before undici is asked to stop reading the socket: what its own body stream held, so that the
 * download pauses as before (the same speed at 64 and 256 KiB in the bench; test/image/http-fin-backpressure.device.test.ts
 * needs images of 192 KiB to pause it).
 */
const HIGH_WATER = 64 * 1024;

type Waiter = { resolve(r: IteratorResult<Buffer>): void; reject(err: Error): void };

const DONE: IteratorResult<Buffer> = { done: true, value: undefined };

export class ResponseBody implements AsyncIterable<Buffer> {
  private readonly queue: Buffer[] = [];
  private queued = 0;
  private paused = false;
  private ended = false;
  private error: Error | null = null;
  private waiter: Waiter | null = null;

  constructor(private readonly controller: Dispatcher.DispatchController) {}

  /** From undici: the next bytes of the body. */
  data(chunk: Buffer): void {
    if (this.error) return;
    markDownloaded(chunk);
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = null;
      resolve({ done: false, value: chunk });
      return;
    }
    this.queue.push(chunk);
    this.queued += chunk.length;
    if (this.queued >= HIGH_WATER && !this.paused) {
      this.paused = true;
      this.controller.pause();
    }
  }

  /** From undici: the body is complete. */
  end(): void {
    this.ended = true;
    if (this.waiter) {
      const { resolve } = this.waiter;
      this.waiter = null;
      resolve(DONE);
    }
  }

  /** From undici, or the reader giving up: the body broke; what is still queued is dropped. */
  fail(err: Error): void {
    if (this.error) return;
    this.error = err;
    this.queue.length = 0;
    this.queued = 0;
    if (this.waiter) {
      const { reject } = this.waiter;
      this.waiter = null;
      reject(err);
    }
  }

  next(): Promise<IteratorResult<Buffer>> {
    if (this.error) return Promise.reject(this.error);
    const chunk = this.queue.shift();
    if (chunk) {
      this.queued -= chunk.length;
      this.resumeBelowHighWater();
      return Promise.resolve({ done: false, value: chunk });
    }
    if (this.ended) return Promise.resolve(DONE);
    const waiting = new Promise<IteratorResult<Buffer>>((resolve, reject) => {
      this.waiter = { resolve, reject };
    });
    // Resuming may hand over the next chunk at once, to the waiter just set.
    this.resumeBelowHighWater();
    return waiting;
  }

  private resumeBelowHighWater(): void {
    if (!this.paused || this.queued >= HIGH_WATER) return;
    this.paused = false;
    this.controller.resume();
  }

  /** Stops the transfer (its connection is closed); reading it afterwards fails. Idempotent. */
  destroy(): void {
    if (this.error || (this.ended && this.queue.length === 0)) return;
    const err = new Error('the response body was abandoned');
    this.fail(err);
    if (!this.ended) this.controller.abort(err);
  }

  [Symbol.asyncIterator](): AsyncIterator<Buffer> {
    return {
      next: () => this.next(),
      return: () => {
        this.destroy();
        return Promise.resolve(DONE);
      },
    };
  }
}

/**
 * Sends a GET through `dispatcher`; resolves with the answer once its headers came. `signal` aborts the
 * request or, later, the body.
 */
export function get(
  dispatcher: Dispatcher,
  url: string,
  headers: Record<string, string>,
  signal: AbortSignal | undefined,
): Promise<Response> {
  if (signal?.aborted) return Promise.reject(signal.reason);
  const target = new URL(url);
  return new Promise((resolve, reject) => {
    let controller: Dispatcher.DispatchController | null = null;
    let body: ResponseBody | null = null;
    let settled = false;
    const reason = () => (signal?.reason instanceof Error ? signal.reason : new Error('the transfer was aborted'));
    const onAbort = () => {
      // Between two hops of a redirect this is the finished hop's: the next one is stopped as it starts.
      controller?.abort(reason());
      if (!settled) {
        settled = true;
        reject(reason());
      }
    };
    signal?.addEventListener('abort', onAbort, { once: true });
    const done = () => signal?.removeEventListener('abort', onAbort);
    try {
      dispatcher.dispatch(
        { origin: target.origin, path: `${target.pathname}${target.search}`, method: 'GET', headers },
        {
          onRequestStart(c) {
            controller = c;
            if (signal?.aborted) c.abort(reason());
          },
          onResponseStart(c, statusCode, responseHeaders) {
            if (statusCode < 200) return;
            if (settled) {
              c.abort(reason());
              return;
            }
            body = new ResponseBody(c);
            settled = true;
            resolve({ statusCode, headers: responseHeaders, body });
          },
          onResponseData(_c, chunk) {
            body?.data(chunk);
          },
          onResponseEnd() {
            done();
            body?.end();
          },
          onResponseError(_c, err) {
            done();
            if (body) body.fail(err);
            else if (!settled) {
              settled = true;
              reject(err);
            }
          },
        },
      );
    } catch (err) {
      done();
      reject(err);
    }
  });
}
