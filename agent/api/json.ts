// JSON as IPA's Python encoder writes it: `", "` and `": "` separators and ASCII-only output.
// Clients only parse it, but byte-level parity keeps captures from both agents comparable.

function str(s: string): string {
  return JSON.stringify(s).replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
}

export function pyJson(value: unknown): string {
  if (value === null || value === undefined) return 'null';
  if (typeof value === 'string') return str(value);
  if (typeof value === 'number') return Number.isFinite(value) ? JSON.stringify(value) : 'null';
  if (typeof value === 'boolean') return value ? 'true' : 'false';
  if (typeof value === 'object' && typeof (value as { toJSON?: unknown }).toJSON === 'function') {
    return pyJson((value as { toJSON(): unknown }).toJSON());
  }
  if (Array.isArray(value)) return `[${value.map(pyJson).join(', ')}]`;
  if (typeof value === 'object') {
    const parts: string[] = [];
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) {
      if (v !== undefined) parts.push(`${str(k)}: ${pyJson(v)}`);
    }
    return `{${parts.join(', ')}}`;
  }
  return 'null';
}
