// JSON as IPA's Python encoder writes it: `", "` and `": "` separators and ASCII-only output.
// Clients only parse it, but byte-level parity keeps captures from both agents comparable.

function str(s: string): string {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/** Deeper than this, a request body is refused before it is parsed; IPA's API carries shallow JSON. */
export const MAX_REQUEST_DEPTH = 64;
/**
 * Deeper than this, the writer puts a marker string in place of the rest. Bodies are bounded on the way in,
 * but a command may still build a deeper result; writing must not overflow the stack, or every listing of
 * the commands would fail from then on.
 */
export const MAX_WRITE_DEPTH = 256;

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

export function pyJson(value: unknown, depth = 0): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return str(value);
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return pyJson((value as { toJSON(): unknown }).toJSON(), depth);
  }
  if (typeof value !== 'object') return 'null';
  if (depth >= MAX_WRITE_DEPTH) return str(`<nested deeper than ${MAX_WRITE_DEPTH} levels, not shown>`);
  if (Array.isArray(value)) return `[${value.map((v) => pyJson(v, depth + 1)).join(', ')}]`;
  const parts: string[] = [];
  for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
    if (v !== undefined) parts.push(`${str(k)}: ${pyJson(v, depth + 1)}`);
  }
  return `{${parts.join(', ')}}`;
}
