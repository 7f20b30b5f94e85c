// Burn-in settings come from the node's driver_info, under IPA's keys and with IPA's defaults. They are
// checked before any tool starts: a bad value fails the step as a CleaningError and runs nothing.
import { CleaningError } from '../errors.ts';
import { BOOLEAN_WORDS, isObject, parseBoolean, parseWholeNumber } from '../parse.ts';

type Info = Record<string, unknown>;

/** The node's driver_info (from a step's `node` param, or the node the agent holds). */
export function driverInfo(node: Record<string, unknown> | undefined): Info {
  return isObject(node?.driver_info) ? node.driver_info : {};
}

const bad = (key: string, value: unknown, want: string) =>
  new CleaningError(`Invalid burn-in setting driver_info.${key}=${JSON.stringify(value)}: expected ${want}`);

/** A whole number ≥ min (IPA's values may arrive as strings, as driver_info is often set from the CLI). */
export function intSetting(info: Info, key: string, fallback: number, min: number): number {
  const v = info[key];
  if (v === undefined || v === null) return fallback;
  const n = parseWholeNumber(v, min);
  if (n === undefined) throw bad(key, v, `a whole number >= ${min}`);
  return n;
}

export function optPath(info: Info, key: string): string | undefined {
  const v = info[key];
  if (v === undefined || v === null || v === '') return undefined;
  if (typeof v !== 'string' || !v.startsWith('/')) throw bad(key, v, 'an absolute file path');
  return v;
}

export function boolSetting(info: Info, key: string): boolean {
  const v = info[key];
  if (v === undefined || v === null) return false;
  const b = parseBoolean(v);
  if (b === undefined) throw bad(key, v, `true or false (${BOOLEAN_WORDS})`);
  return b;
}

/** stress-ng's --vm-bytes: a size with an optional b/k/m/g suffix, or a percentage of memory. */
export function vmBytes(info: Info, key: string, fallback: string): string {
  const v = info[key];
  if (v === undefined || v === null) return fallback;
  const s = String(v);
  if ((typeof v !== 'string' && typeof v !== 'number') || !/^(\d+[bkmgBKMG]?|\d{1,2}(\.\d+)?%|100%)$/.test(s)) {
    throw bad(key, v, 'a size such as 512M, 4G, or a percentage of memory such as 98%');
  }
  return s;
}

export function objectSetting(info: Info, key: string): Info | undefined {
  const v = info[key];
  if (v === undefined || v === null) return undefined;
  if (isObject(v)) return v;
  if (typeof v === 'string') {
    try {
      const parsed: unknown = JSON.parse(v);
      if (isObject(parsed)) return parsed;
    } catch {
      // reported below
    }
  }
  throw bad(key, v, 'an object');
}
