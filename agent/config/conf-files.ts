// IPA's configuration files: /etc/ironic-python-agent.conf and the *.conf files of /etc/ironic-python-agent.d,
// in oslo.config's INI form. A virtual-media boot brings them on Ironic's ISO (its TLS CA file, for one:
// docs/ipa-compat.md, "Virtual media"). Their options carry IPA's option names; each is read as the kernel
// parameter of the same meaning, so config.ts parses every value by one set of rules whatever its source.
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { ConfigError } from './reader.ts';

/** A value from a file, by the kernel parameter it stands for. */
export interface ConfValue {
  value: string;
  /** Where it was set, for error messages: `option api_url in /etc/…`. */
  origin: string;
}

export interface ConfFiles {
  values: Map<string, ConfValue>;
  /** Options outside [DEFAULT]: IPA's other sections hold nothing this agent has. */
  otherSections: string[];
}

/** Options whose kernel parameter is not `ipa-` and the option's name with dashes. */
const PARAM_OF: Record<string, string> = { ip_lookup_sleep: 'ipa-ip-lookup-timeout' };

export function paramOf(option: string): string {
  return PARAM_OF[option] ?? `ipa-${option.replaceAll('_', '-')}`;
}

/** One file's `[section] option = value` lines; later files and later lines win, as in oslo.config. */
export function parseConf(text: string, file: string, into: ConfFiles): void {
  let section = 'DEFAULT';
  let last: ConfValue | undefined;
  for (const [i, line] of text.split('\n').entries()) {
    if (/^\s*([#;].*)?$/.test(line)) continue;
    if (/^\s/.test(line) && last) {
      // An indented line continues the value above it.
      last.value += `\n${line.trim()}`;
      continue;
    }
    const header = /^\[([^\]]+)\]\s*$/.exec(line);
    if (header) {
      section = header[1]!.trim();
      last = undefined;
      continue;
    }
    const pair = /^([^=:\s][^=:]*?)\s*[=:]\s*(.*)$/.exec(line);
    if (!pair) throw new ConfigError(`${file} line ${i + 1}: expected "option = value" or "[section]"`);
    const option = pair[1]!.trim();
    let value = pair[2]!.trim();
    if (value.length >= 2 && (value[0] === '"' || value[0] === "'") && value.at(-1) === value[0])
      value = value.slice(1, -1);
    if (section !== 'DEFAULT') {
      into.otherSections.push(`[${section}] ${option} (${file})`);
      last = undefined;
      continue;
    }
    last = { value, origin: `option ${option} in ${file}` };
    into.values.set(paramOf(option), last);
  }
}

function readIfThere(path: string): string | undefined {
  try {
    return readFileSync(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return undefined;
    throw new ConfigError(`cannot read ${path}: ${(err as Error).message}`);
  }
}

/** `file`, then the `*.conf` files of `dir` in name order (oslo's --config-file, then --config-dir). */
export function readConfFiles(file: string, dir: string): ConfFiles {
  const out: ConfFiles = { values: new Map(), otherSections: [] };
  const text = readIfThere(file);
  if (text !== undefined) parseConf(text, file, out);
  let names: string[] = [];
  try {
    names = readdirSync(dir).filter((n) => n.endsWith('.conf'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
      throw new ConfigError(`cannot read ${dir}: ${(err as Error).message}`);
  }
  for (const name of names.sort()) {
    const path = join(dir, name);
    const t = readIfThere(path);
    if (t !== undefined) parseConf(t, path, out);
  }
  return out;
}
