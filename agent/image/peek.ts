// Looking at the first bytes of a stream before passing it on, as several stages of the data path do
// (compression sniffing, the header checks): read a head off the iterator, then hand on the rest. Once the
// head is out, a stage built with `afterHead` is the source's own iterator: no generator, promise or copy of
// its own per chunk (a GiB is 16,000 chunks; docs/performance.md).

/** Reads from `it` until at least `bytes` have come (fewer if the stream ends first); returns them joined. */
export async function readAtLeast(it: AsyncIterator<Buffer>, bytes: number): Promise<Buffer> {
  const parts: Buffer[] = [];
  let length = 0;
  while (length < bytes) {
    const r = await it.next();
    if (r.done) break;
    parts.push(r.value);
    length += r.value.length;
  }
  return Buffer.concat(parts);
}

/** Whatever `it` has not given yet, as an iterable for `yield*`. */
export function rest<T>(it: AsyncIterator<T>): AsyncIterable<T> {
  return { [Symbol.asyncIterator]: () => it };
}

/**
 * A stream that, on its first pull, runs `head` (which reads what it needs off `it` and returns those
 * bytes), gives that head (if not empty), then the rest of `it` as `it` gives it. Stopping it stops `it`.
 */
export function afterHead(it: AsyncIterator<Buffer>, head: () => Promise<Buffer>): AsyncIterableIterator<Buffer> {
  let started = false;
  let passing = false;
  let failure: unknown;
  return {
    [Symbol.asyncIterator]() {
      return this;
    },
    next() {
      if (passing) return it.next();
      // A head that was refused stays refused: nothing behind it may pass.
      if (started) return Promise.reject(failure ?? new Error('internal: the head is still being read'));
      started = true;
      return head().then(
        (bytes) => {
          passing = true;
          return bytes.length > 0 ? { done: false, value: bytes } : it.next();
        },
        (err: unknown) => {
          failure = err;
          throw err;
        },
      );
    },
    return(value?: unknown) {
      return it.return ? it.return(value) : Promise.resolve({ done: true, value });
    },
  };
}
