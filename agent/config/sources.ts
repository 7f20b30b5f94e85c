// Raw parameter sources: the kernel command line and the process flags, as name -> value maps.
// Both use IPA's parameter names; parsing into types happens once, in config.ts.

/** Kernel command line: `k=v` tokens split at the first `=`; a later duplicate wins. */
export function parseKernelCmdline(text: string): Map<string, string> {
  const out = new Map<string, string>();
  // As the kernel splits its command line: a space inside double quotes does not end a parameter, and the
  // quotes around a value are dropped (DIB's `sshkey="ssh-ed25519 AAAA… comment"`).
  for (const [token] of text.matchAll(/(?:[^\s"]+|"[^"]*"?)+/g)) {
    const eq = token.indexOf('=');
    if (eq <= 0) continue;
    let value = token.slice(eq + 1);
    if (value.startsWith('"')) value = value.slice(1, value.endsWith('"') && value.length > 1 ? -1 : undefined);
    out.set(token.slice(0, eq), value);
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
