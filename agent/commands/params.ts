// Small typed readers for command params, on parse.ts's rules; every failure is an
// InvalidCommandParamsError (HTTP 400) naming the key.
import { InvalidCommandParamsError } from '../errors.ts';
import { BOOLEAN_WORDS, isObject, parseBoolean } from '../parse.ts';
import type { Params } from './types.ts';

export { isObject };

export function optObject(p: Params, key: string): Record<string, unknown> | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  if (!isObject(v)) throw new InvalidCommandParamsError(`'${key}' must be an object`);
  return v;
}

export function reqObject(p: Params, key: string): Record<string, unknown> {
  const v = optObject(p, key);
  if (v === undefined) throw new InvalidCommandParamsError(`'${key}' is required`);
  return v;
}

export function optString(p: Params, key: string): string | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw new InvalidCommandParamsError(`'${key}' must be a string`);
  return v;
}

export function reqString(p: Params, key: string): string {
  const v = optString(p, key);
  if (v === undefined || v === '') throw new InvalidCommandParamsError(`'${key}' is required`);
  return v;
}

export function optBool(p: Params, key: string): boolean | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  const b = parseBoolean(v);
  if (b === undefined) throw new InvalidCommandParamsError(`'${key}' must be a boolean (${BOOLEAN_WORDS})`);
  return b;
}

export function optNumber(p: Params, key: string): number | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  const n = typeof v === 'string' ? Number(v) : v;
  if (typeof n !== 'number' || !Number.isFinite(n)) throw new InvalidCommandParamsError(`'${key}' must be a number`);
  return n;
}

export function optArray(p: Params, key: string): unknown[] | undefined {
  const v = p[key];
  if (v === undefined || v === null) return undefined;
  if (!Array.isArray(v)) throw new InvalidCommandParamsError(`'${key}' must be a list`);
  return v;
}
