// Looking at the first bytes of a stream before passing it on, as several stages of the data path do
// (compression sniffing, the header checks): read a head off the iterator, then hand on the rest.

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
