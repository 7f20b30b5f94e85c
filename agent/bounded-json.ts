// Every JSON body from outside, whichever side it comes from (a request to the command API, a reply of the
// conductor or of an inspection callback), is read under a byte cap while it streams and parsed under a
// depth bound. A peer that answers with megabytes of `[` must cost the agent at most the cap, and nothing
// that walks the parsed value afterwards (validation, results, the writer) may recurse without end.

/** Deeper than this, a body is refused before it is parsed; IPA's API and Ironic's replies carry shallow JSON. */
export const MAX_JSON_DEPTH = 64;

/** A body from outside that is not acceptable JSON; the message says why, for the caller's own error. */
export class JsonRefused extends Error {}

/** A body that grew past its cap while being read; reading stopped there. */
export class BodyOverCap extends JsonRefused {
  constructor(readonly cap: number) {
    super(`body larger than ${cap} bytes`);
  }
}

/** Whether `text` nests arrays and objects more than `max` levels deep (counted outside strings, without parsing). */
export function nestedDeeperThan(text: string, max: number): boolean {
  let depth = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (inString) {
      if (c === 0x5c) i++;
      else if (c === 0x22) inString = false;
    } else if (c === 0x22) {
      inString = true;
    } else if (c === 0x5b || c === 0x7b) {
      if (++depth > max) return true;
    } else if (c === 0x5d || c === 0x7d) {
      depth--;
    }
  }
  return false;
}

/**
 * The value of `text`, refused (JsonRefused) when it nests deeper than `maxDepth` or is not JSON. The depth is
 * checked by a flat scan first, so the parse never meets a document deeper than the bound.
 */
export function parseBoundedJson(text: string, maxDepth = MAX_JSON_DEPTH): unknown {
  if (nestedDeeperThan(text, maxDepth)) throw new JsonRefused(`nesting deeper than ${maxDepth} levels`);
  try {
    return JSON.parse(text) as unknown;
  } catch (err) {
    throw new JsonRefused((err as Error).message);
  }
}

/**
 * The bytes of `source` up to `cap`. Past it, reading stops at once (BodyOverCap) and the source is ended
 * (`for await` destroys a Node stream it leaves early), so the rest stays with the peer, never in memory.
 */
export async function readCapped(source: AsyncIterable<Uint8Array>, cap: number): Promise<Buffer> {
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of source) {
    if (size + chunk.length > cap) throw new BodyOverCap(cap);
    chunks.push(chunk);
    size += chunk.length;
  }
  return Buffer.concat(chunks, size);
}
