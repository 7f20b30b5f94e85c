// JSON as IPA's Python encoder writes it: `", "` and `": "` separators and ASCII-only output.
// Clients only parse it, but byte-level parity keeps captures from both agents comparable.

function str(s: string): string {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

/**
 * Deeper than this, the writer puts a marker string in place of the rest. Bodies are bounded on the way in,
 * but a command may still build a deeper result; writing must not overflow the stack, or every listing of
 * the commands would fail from then on.
 */
export const MAX_WRITE_DEPTH = 256;

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
