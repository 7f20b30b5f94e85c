// Request bodies are read under two bounds, before anything is buffered whole: a size limit (413 beyond
// it, decided from Content-Length when there is one, else while reading) and one large body at a time (the
// others wait their turn with their bytes left in the socket), so that a flood of big POSTs, token or not,
// cannot grow the agent's memory with their number. IPA's API carries small JSON; the largest legitimate
// body is a deploy with its config drive, at most 64 MiB decoded, gzip-compressed and base64-encoded.
import type { Context } from 'hono';

const MiB = 1024 * 1024;
/** 64 MiB of incompressible config drive grows by a third in base64 (85.4 MiB), plus the rest of the request. */
export const MAX_BODY_BYTES = 90 * MiB;
/** Bodies up to this size are read at once, without waiting for the large-body turn. */
const SMALL_BODY_BYTES = 1 * MiB;

export class BodyTooLarge extends Error {}

/** A FIFO of one: whoever holds it reads (and parses) a large body. */
class Turn {
  private tail: Promise<void> = Promise.resolve();

  async take(): Promise<() => void> {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise((resolve) => (release = resolve));
    await previous;
    return release;
  }
}

const largeBodies = new WeakMap<object, Turn>();

async function readLimited(
  body: ReadableStream<Uint8Array> | null,
  declared: number | undefined,
  max: number,
): Promise<Buffer> {
  if (!body) return Buffer.alloc(0);
  const reader = body.getReader();
  // With a declared length, one buffer of that size: no chunk list and no copy of it at the end.
  const whole = declared !== undefined ? Buffer.allocUnsafe(declared) : null;
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      if (size + value.length > (declared ?? max)) throw new BodyTooLarge();
      if (whole) whole.set(value, size);
      else chunks.push(value);
      size += value.length;
    }
  } catch (err) {
    await reader.cancel().catch(() => undefined);
    throw err;
  }
  return whole ? whole.subarray(0, size) : Buffer.concat(chunks, size);
}

/**
 * Reads the request's body as text and hands it to `use` (which parses it), within the limits above.
 * Throws BodyTooLarge past `max`; `owner` scopes the one-at-a-time turn (one per app).
 */
export async function withBody<T>(
  c: Context,
  owner: object,
  use: (text: string) => T,
  max = MAX_BODY_BYTES,
): Promise<T> {
  const header = c.req.header('content-length');
  const declared = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
  if (declared !== undefined && declared > max) throw new BodyTooLarge();
  let turn = largeBodies.get(owner);
  if (!turn) {
    turn = new Turn();
    largeBodies.set(owner, turn);
  }
  const release = declared !== undefined && declared <= SMALL_BODY_BYTES ? () => undefined : await turn.take();
  try {
    const text = (await readLimited(c.req.raw.body, declared, max)).toString('utf8');
    return use(text);
  } finally {
    release();
  }
}
