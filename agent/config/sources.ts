// Raw parameter sources: the kernel command line and the process flags, as name -> value maps.
// Both use IPA's parameter names; parsing into types happens once, in config.ts.

/** Kernel command line: whitespace-split `k=v` tokens, split at the first `=`; a later duplicate wins. */
export function parseKernelCmdline(text: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const token of text.split(/\s+/)) {
    const eq = token.indexOf('=');
    if (eq <= 0) continue;
    out.set(token.slice(0, eq), token.slice(eq + 1));
  }
  return out;
}

export class FlagSyntaxError extends Error {}

/** `--name=value`, `--name value` or a bare `--name` (true). Anything else is an error. */
export function parseFlags(argv: readonly string[]): Map<string, string> {
  const out = new Map<string, string>();
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (arg === '--') continue;
    if (!arg.startsWith('--') || arg.length === 2) throw new FlagSyntaxError(`unexpected argument "${arg}"`);
    const body = arg.slice(2);
    const eq = body.indexOf('=');
    if (eq >= 0) {
      out.set(body.slice(0, eq), body.slice(eq + 1));
    } else if (i + 1 < argv.length && !argv[i + 1]!.startsWith('--')) {
      out.set(body, argv[++i]!);
    } else {
      out.set(body, 'true');
    }
  }
  return out;
}
