// Typed reads over the merged parameter map, by parse.ts's rules for booleans and numbers. Each read remembers
// the name, so that a flag nobody reads can be reported as unknown; each bad value fails with a one-line error
// naming the parameter.

import { BOOLEAN_WORDS, parseBoolean, parseNumber, parseWholeNumber } from '../parse.ts';

export class ConfigError extends Error {}

export class ParamReader {
  private readonly read = new Set<string>();

  constructor(
    private readonly values: ReadonlyMap<string, string>,
    private readonly origin: (name: string) => string,
  ) {}

  private raw(name: string): string | undefined {
    this.read.add(name);
    return this.values.get(name);
  }

  private fail(name: string, value: string, want: string): never {
    throw new ConfigError(`${this.origin(name)}=${JSON.stringify(value)}: ${want}`);
  }

  str(name: string): string | undefined;
  str(name: string, fallback: string): string;
  str(name: string, fallback?: string): string | undefined {
    const v = this.raw(name);
    return v === undefined || v === '' ? fallback : v;
  }

  bool(name: string, fallback: boolean): boolean {
    const v = this.raw(name);
    if (v === undefined) return fallback;
    // `ipa-foo=` on the kernel command line: given, but empty, reads as off.
    if (v === '') return false;
    return parseBoolean(v) ?? this.fail(name, v, `expected a boolean (${BOOLEAN_WORDS})`);
  }

  /** `why` explains a minimum that comes from what a tool needs rather than from the value's meaning. */
  num(
    name: string,
    fallback: number,
    opts: { min?: number; max?: number; integer?: boolean; why?: string } = {},
  ): number {
    const v = this.raw(name);
    if (v === undefined || v === '') return fallback;
    const n = parseNumber(v) ?? this.fail(name, v, 'expected a number');
    if (opts.integer && parseWholeNumber(v, -Number.MAX_SAFE_INTEGER) === undefined)
      return this.fail(name, v, 'expected a whole number');
    if (opts.min !== undefined && n < opts.min)
      return this.fail(name, v, `must be at least ${opts.min}${opts.why ? `: ${opts.why}` : ''}`);
    if (opts.max !== undefined && n > opts.max) return this.fail(name, v, `must be at most ${opts.max}`);
    return n;
  }

  oneOf<T extends string>(name: string, choices: readonly T[], fallback: T): T {
    const v = this.raw(name);
    if (v === undefined || v === '') return fallback;
    if ((choices as readonly string[]).includes(v)) return v as T;
    return this.fail(name, v, `expected one of ${choices.join(', ')}`);
  }

  list(name: string, fallback: string[] = []): string[] {
    const v = this.raw(name);
    if (v === undefined || v === '') return fallback;
    return v
      .split(',')
      .map((s) => s.trim())
      .filter((s) => s !== '');
  }

  /** Whether `name` was given at all (counts as read). */
  given(name: string): boolean {
    return this.raw(name) !== undefined;
  }

  check(name: string, value: string, ok: boolean, want: string): void {
    if (!ok) this.fail(name, value, want);
  }

  /** Names present in `names` that no read asked for. */
  unread(names: Iterable<string>): string[] {
    return [...names].filter((n) => !this.read.has(n));
  }
}
