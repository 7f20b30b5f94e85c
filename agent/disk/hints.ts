// Root device hints, IPA's grammar: a hint name, an optional operator, values. Pure functions: parse once
// (bad hints are a HintError naming the hint), then test each device's IPA view against the parsed set.

export type HintKind = 'str' | 'int' | 'bool';

export const HINT_KINDS: Readonly<Record<string, HintKind>> = {
  size: 'int',
  model: 'str',
  wwn: 'str',
  serial: 'str',
  vendor: 'str',
  wwn_with_extension: 'str',
  wwn_vendor_extension: 'str',
  name: 'str',
  rotational: 'bool',
  hctl: 'str',
  by_path: 'str',
  tran: 'str',
};

export class HintError extends Error {}

type NumOp = '==' | '!=' | '>=' | '<=' | '>' | '<' | '=';
type StrOp = 's==' | 's!=' | 's<' | 's<=' | 's>' | 's>=';
type ListOp = '<in>' | '<or>' | '<all-in>' | '<range-in>';
export type Operator = NumOp | StrOp | ListOp;

export type ParsedHint =
  | { name: string; kind: 'bool'; value: boolean }
  | { name: string; kind: 'str' | 'int'; op: Operator; values: string[]; range?: Range };

interface Range {
  lo: number;
  hi: number;
  loInclusive: boolean;
  hiInclusive: boolean;
}

const OPERATORS: readonly Operator[] = [
  '<range-in>',
  '<all-in>',
  '<in>',
  '<or>',
  's==',
  's!=',
  's<=',
  's>=',
  's<',
  's>',
  '==',
  '!=',
  '>=',
  '<=',
  '>',
  '<',
  '=',
];
const STRING_OPS = new Set<Operator>(['s==', 's!=', 's<', 's<=', 's>', 's>=', '<in>', '<all-in>', '<or>']);
const NUMBER_OPS = new Set<Operator>(['==', '!=', '>=', '<=', '>', '<', '=', '<or>', '<range-in>']);
const TRUE = new Set(['1', 't', 'true', 'on', 'y', 'yes']);
const FALSE = new Set(['0', 'f', 'false', 'off', 'n', 'no']);

/** Python's `urllib.parse.quote` (safe `/`): both sides are quoted so whitespace and case never differ. */
export function quote(text: string): string {
  return Array.from(new TextEncoder().encode(text), (b) => {
    const c = String.fromCharCode(b);
    return /[A-Za-z0-9_.\-~/]/.test(c) ? c : `%${b.toString(16).toUpperCase().padStart(2, '0')}`;
  }).join('');
}

export function normaliseString(value: string): string {
  return quote(value.trim().toLowerCase());
}

function splitOperator(expr: string): { op: Operator | null; values: string[] } {
  const op = OPERATORS.find((o) => expr.startsWith(o)) ?? null;
  if (!op) return { op: null, values: [expr] };
  if (op === '<or>')
    return {
      op,
      values: expr
        .split('<or>')
        .map((v) => v.trim())
        .filter((v) => v !== ''),
    };
  if (op === '<all-in>')
    return {
      op,
      values: expr
        .slice(op.length)
        .trim()
        .split(/\s+/)
        .filter((v) => v !== ''),
    };
  return { op, values: [expr.slice(op.length).trim()] };
}

function parseRange(name: string, text: string): Range {
  const m = /^([[(])\s*(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s*([\])])$/.exec(text);
  if (!m)
    throw new HintError(`Root device hint "${name}" has an invalid range "${text}"; expected e.g. [10 20] or (10 20]`);
  return { loInclusive: m[1] === '[', lo: Number(m[2]), hi: Number(m[3]), hiInclusive: m[4] === ']' };
}

function parseOne(name: string, raw: unknown): ParsedHint {
  const kind = HINT_KINDS[name]!;
  if (kind === 'bool') {
    const text = String(raw).trim().toLowerCase();
    if (typeof raw === 'boolean') return { name, kind, value: raw };
    if (TRUE.has(text)) return { name, kind, value: true };
    if (FALSE.has(text)) return { name, kind, value: false };
    throw new HintError(`Root device hint "${name}" is not a Boolean value. Current value: ${String(raw)}`);
  }
  if (kind === 'str' && typeof raw !== 'string') {
    throw new HintError(`Root device hint "${name}" is not a string value. Hint expression: ${String(raw)}`);
  }
  const expr = String(raw).trim().toLowerCase();
  if (expr === '') throw new HintError(`Root device hint "${name}" expression is empty`);
  const { op, values } = splitOperator(expr);
  if (values.length === 0) throw new HintError(`Root device hint "${name}" has an operator but no value: ${expr}`);
  if (kind === 'str') {
    if (op && !STRING_OPS.has(op)) {
      throw new HintError(`Root device hint "${name}" is a string; use s==, s!=, <in>, <or>, … not ${op}`);
    }
    return { name, kind, op: op ?? 's==', values: values.map(quote) };
  }
  if (op === '<range-in>') return { name, kind, op, values, range: parseRange(name, values[0]!) };
  if (op && !NUMBER_OPS.has(op))
    throw new HintError(`Root device hint "${name}" is a number; ${op} does not compare numbers`);
  for (const v of values) {
    if (!/^\d+$/.test(v))
      throw new HintError(`Root device hint "${name}" is not an integer value. Current value: ${String(raw)}`);
    if (Number(v) <= 0)
      throw new HintError(`Root device hint "${name}" should be a positive integer. Current value: ${String(raw)}`);
  }
  return { name, kind, op: op ?? '==', values };
}

/** Validates and parses hints; an unknown name, a wrong type or a malformed expression is a HintError. */
export function parseHints(hints: Record<string, unknown>): ParsedHint[] {
  const invalid = Object.keys(hints).filter((k) => !(k in HINT_KINDS));
  if (invalid.length > 0) {
    throw new HintError(
      `The hints "${invalid.join(', ')}" are invalid. Valid hints are: "${Object.keys(HINT_KINDS).join(', ')}"`,
    );
  }
  return Object.entries(hints).map(([name, raw]) => parseOne(name, raw));
}

function compareNumbers(op: Operator, x: number, values: string[], range?: Range): boolean {
  const y = Number(values[0]);
  switch (op) {
    case '=':
    case '>=':
      return x >= y;
    case '==':
      return x === y;
    case '!=':
      return x !== y;
    case '<=':
      return x <= y;
    case '<':
      return x < y;
    case '>':
      return x > y;
    case '<or>':
      return values.some((v) => Number(v) === x);
    case '<range-in>': {
      const r = range!;
      return (r.loInclusive ? x >= r.lo : x > r.lo) && (r.hiInclusive ? x <= r.hi : x < r.hi);
    }
    default:
      return false;
  }
}

function compareStrings(op: Operator, x: string, values: string[]): boolean {
  const y = values[0]!;
  switch (op) {
    case 's==':
      return x === y;
    case 's!=':
      return x !== y;
    case 's<':
      return x < y;
    case 's<=':
      return x <= y;
    case 's>':
      return x > y;
    case 's>=':
      return x >= y;
    case '<in>':
      return x.includes(y);
    case '<all-in>':
      return values.every((v) => x.includes(v));
    case '<or>':
      return values.some((v) => v === x);
    default:
      return false;
  }
}

/** A value is one, or (for a string hint) several that the hint may match any of. */
export type DeviceView = Readonly<
  Record<string, string | number | boolean | null | undefined | readonly (string | null)[]>
>;

/** Does one device (its IPA view: `name` = /dev path, `size` = bytes) satisfy every hint? */
export function matchesHints(device: DeviceView, hints: readonly ParsedHint[]): boolean {
  return hints.every((h) => {
    const value = device[h.name];
    if (Array.isArray(value)) return value.some((v) => matchesHints({ [h.name]: v }, [h]));
    if (h.kind === 'bool') return typeof value === 'boolean' && value === h.value;
    if (value === null || value === undefined || value === '') return false;
    if (h.kind === 'int') {
      // Sizes are hinted in GiB; the device's byte count is compared as a fraction of GiB, as IPA does.
      const x = h.name === 'size' ? Number(value) / 2 ** 30 : Number(value);
      return compareNumbers(h.op, x, h.values, h.range);
    }
    return compareStrings(h.op, normaliseString(String(value)), h.values);
  });
}
