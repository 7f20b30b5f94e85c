// The rules for values that come from outside (kernel parameters, flags and config files, command params,
// image_info, node settings, the lookup reply, network_data.json): what counts as an object, a string, a boolean,
// a number, a whole number. Each caller
// wraps a refusal in its own error (a config error, HTTP 400, an ignored lookup key). Root-device hints keep a
// word list of their own (disk/hints.ts), since they compare values as IPA's hint matcher does.

export function isObject(v: unknown): v is Record<string, unknown> {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

/** What Python reads as false: the node values IPA's `x.get(…) or …` and `if not x` pass over. */
export function pythonFalsy(v: unknown): boolean {
  return (
    v === undefined ||
    v === null ||
    v === '' ||
    v === false ||
    v === 0 ||
    (Array.isArray(v) && v.length === 0) ||
    (isObject(v) && Object.keys(v).length === 0)
  );
}

/** `v` when it is an object, else undefined. */
export function objectOr(v: unknown): Record<string, unknown> | undefined {
  return isObject(v) ? v : undefined;
}

/** `v` when it is a non-empty string, else undefined. */
export function nonEmptyString(v: unknown): string | undefined {
  return typeof v === 'string' && v !== '' ? v : undefined;
}

const TRUE = new Set(['1', 'true', 'yes', 'on', 't', 'y']);
const FALSE = new Set(['0', 'false', 'no', 'off', 'f', 'n']);

/** The words a boolean may be written as, for error messages. */
export const BOOLEAN_WORDS = '1/0, true/false, yes/no, on/off, t/f, y/n';

/**
 * A boolean: JSON true/false, or one of BOOLEAN_WORDS in any case (oslo's strict reading). Anything else
 * (`"maybe"`, a number other than 0/1 as text, an object) is undefined, which every caller refuses.
 */
export function parseBoolean(v: unknown): boolean | undefined {
  if (typeof v === 'boolean') return v;
  if (typeof v !== 'string') return undefined;
  const word = v.trim().toLowerCase();
  if (TRUE.has(word)) return true;
  if (FALSE.has(word)) return false;
  return undefined;
}

/**
 * A finite number: a JSON number, or text of decimal digits with an optional sign, point and exponent (`600`,
 * `0.5`, `-1`, `.5`, `1e3`), spaces around allowed: the common spellings Python's float() reads (oslo's
 * FloatOpt). Python's digit separators (`1_000`), `nan` and `inf` are not accepted, nor JavaScript's own
 * spellings (`0x10`, `0b1`, `Infinity`): those and anything else are undefined, which every caller refuses.
 */
export function parseNumber(v: unknown): number | undefined {
  const n = typeof v === 'string' && /^\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:e[+-]?\d+)?\s*$/i.test(v) ? Number(v) : v;
  return typeof n === 'number' && Number.isFinite(n) ? n : undefined;
}

/**
 * A whole number from `min` to `max`: a JSON integer, or its decimal digits as text (node fields set from the CLI
 * arrive as text), as Python's int() reads one (oslo's IntOpt). Anything else (`"abc"`, 2.5, `"1e3"`, 1e300 past
 * `max`, a boolean) is undefined, which every caller refuses.
 */
export function parseWholeNumber(v: unknown, min: number, max = Number.MAX_SAFE_INTEGER): number | undefined {
  const n = typeof v === 'string' && /^\s*[+-]?\d+\s*$/.test(v) ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isInteger(n) || n < min || n > max) return undefined;
  return n;
}
