// Request bodies are read under three bounds, before anything is buffered whole: a size limit (413 beyond
// it, decided from Content-Length when there is one, else while reading), one large body at a time (the
// others wait their turn with their bytes left in the socket), so that a flood of big POSTs cannot grow the
// agent's memory with their number, and a stall limit (408, and the connection closed), so that a client
// that stops sending cannot keep the large-body turn, and the conductor's requests queued behind it, for
// ever. IPA's API carries small JSON; the largest legitimate body is a deploy with its config drive, at most
// 64 MiB decoded, gzip-compressed and base64-encoded. The token is checked (app.ts) before a body is read,
// so a client without it never takes the turn.
import type { Context } from 'hono';
import type { Clock } from '../clock.ts';
import { FifoLock } from '../lock.ts';

const MiB = 1024 * 1024;
/** 64 MiB of incompressible config drive grows by a third in base64 (85.4 MiB), plus the rest of the request. */
export const MAX_BODY_BYTES = 90 * MiB;
/** Bodies up to this size are read at once, without waiting for the large-body turn. */
const SMALL_BODY_BYTES = 1 * MiB;
/**
 * A body that delivers nothing for BODY_STALL_MS is cut: that is a client that stopped sending. A slow but
 * moving one is read (a conductor at an edge site sends a large config drive over a WAN at a few Mbit/s, and
 * Ironic's own timeout is per socket operation, not for the whole request). Only a trickle that keeps the
 * stall timer at bay without delivering is cut by the floor: BODY_FLOOR_RATE bytes a second on average,
 * counted after BODY_FLOOR_GRACE_MS (the largest body then gets 60 s + 48 min).
 */
export const BODY_STALL_MS = 30_000;
export const BODY_FLOOR_GRACE_MS = 60_000;
export const BODY_FLOOR_RATE = 32 * 1024;

export class BodyTooLarge extends Error {}
export class BodyTooSlow extends Error {}

/**
 * Calls `onSlow` once the bytes `received` stop coming (BODY_STALL_MS since the last) or fall behind the floor
 * rate. Only wakes when one of them could: at the earlier of the two deadlines, then again from there.
 */
function stallWatch(clock: Clock, onSlow: () => void): { received(n: number): void; stop(): void } {
  const start = clock.now();
  let bytes = 0;
  let last = start;
  let stopped = false;
  const arm = () => {
    if (stopped) return;
    const deadline = Math.min(last + BODY_STALL_MS, start + BODY_FLOOR_GRACE_MS + (bytes / BODY_FLOOR_RATE) * 1000);
    const wait = deadline - clock.now();
    if (wait <= 0) return onSlow();
    clock.timeout(wait).addEventListener('abort', arm, { once: true });
  };
  arm();
  return {
    received(n) {
      bytes += n;
      last = clock.now();
    },
    stop() {
      stopped = true;
    },
  };
}

async function readLimited(
  body: ReadableStream<Uint8Array> | null,
  declared: number | undefined,
  max: number,
  clock: Clock,
): Promise<Buffer> {
  if (!body) return Buffer.alloc(0);
  const reader = body.getReader();
  let slow = false;
  const watch = stallWatch(clock, () => {
    slow = true;
    // A pending read() resolves as done; the check after it tells this from the real end.
    reader.cancel().catch(() => undefined);
  });
  // With a declared length, one buffer of that size: no chunk list and no copy of it at the end.
  const whole = declared !== undefined ? Buffer.allocUnsafe(declared) : null;
  const chunks: Uint8Array[] = [];
  let size = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (slow) throw new BodyTooSlow();
      if (done) break;
      if (size + value.length > (declared ?? max)) throw new BodyTooLarge();
      if (whole) whole.set(value, size);
      else chunks.push(value);
      size += value.length;
      watch.received(value.length);
    }
  } catch (err) {
    await reader.cancel().catch(() => undefined);
    throw err;
  } finally {
    watch.stop();
  }
  return whole ? whole.subarray(0, size) : Buffer.concat(chunks, size);
}

/** The request-body reader of one app: its large-body turn and the clock its stalls are measured on. */
export class BodyReader {
  private readonly largeTurn = new FifoLock();

  constructor(private readonly clock: Clock) {}

  /**
   * Reads the request's body as text and hands it to `use` (which parses it), within the limits above.
   * Throws BodyTooLarge past `max`, BodyTooSlow when the client stalls (see BODY_STALL_MS).
   */
  async read<T>(c: Context, use: (text: string) => T, max = MAX_BODY_BYTES): Promise<T> {
    const header = c.req.header('content-length');
    const declared = header !== undefined && /^\d+$/.test(header) ? Number(header) : undefined;
    if (declared !== undefined && declared > max) throw new BodyTooLarge();
    const readAndUse = async () => use((await readLimited(c.req.raw.body, declared, max, this.clock)).toString('utf8'));
    // The stall and the rate are measured from when the turn is taken: a body waiting for it is not sending.
    if (declared !== undefined && declared <= SMALL_BODY_BYTES) return readAndUse();
    return this.largeTurn.hold(readAndUse);
  }
}
