// Kernel module selection: resolves a list of module names to .ko files plus everything they depend
// on (the `depends=` entry of each module's .modinfo), in an order in which they can be loaded.
import { readFileSync, readdirSync } from 'node:fs';
import { join, relative } from 'node:path';

const norm = (name: string) => name.replaceAll('-', '_');

function indexModules(dir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = join(d, e.name);
      if (e.isDirectory()) walk(p);
      else if (e.name.endsWith('.ko')) out.set(norm(e.name.slice(0, -3)), p);
    }
  };
  walk(dir);
  return out;
}

/** Every `key=value` of the module's .modinfo with this key (entries are NUL-separated strings). */
function modinfo(ko: string, key: string): string[] {
  const bytes = readFileSync(ko);
  const needle = Buffer.from(`\0${key}=`);
  const out: string[] = [];
  for (let at = bytes.indexOf(needle); at >= 0; at = bytes.indexOf(needle, at + 1)) {
    const end = bytes.indexOf(0, at + 1);
    out.push(bytes.subarray(at + needle.length, end).toString());
  }
  return out;
}

function dependsOf(ko: string): string[] {
  const value = modinfo(ko, 'depends')[0];
  return value ? value.split(',').map(norm) : [];
}

/** modules.alias lines (`alias <pattern> <module>`), which let modprobe load drivers by modalias. */
export function aliasLines(moduleDir: string, paths: readonly string[]): string[] {
  return paths.flatMap((p) => {
    const name = norm(p.split('/').pop()!.replace(/\.ko$/, ''));
    return [...new Set(modinfo(join(moduleDir, p), 'alias'))].map((a) => `alias ${a} ${name}`);
  });
}

/**
 * Load-ordered module files (paths relative to `moduleDir`), each with all modules it needs, listed
 * last-loaded first as modules.dep has them.
 */
export function resolveModules(moduleDir: string, names: readonly string[]): { path: string; deps: string[] }[] {
  const index = indexModules(join(moduleDir, 'kernel'));
  const ordered: { path: string; deps: string[] }[] = [];
  const done = new Set<string>();
  const byName = new Map<string, string[]>();
  const visit = (name: string, chain: string[]) => {
    if (done.has(name)) return;
    if (chain.includes(name)) throw new Error(`module dependency cycle: ${[...chain, name].join(' -> ')}`);
    const ko = index.get(name);
    if (!ko) throw new Error(`kernel module ${name} not found under ${moduleDir}`);
    const deps = dependsOf(ko);
    for (const d of deps) visit(d, [...chain, name]);
    done.add(name);
    const all = new Set(deps.flatMap((d) => [relative(moduleDir, index.get(d)!), ...byName.get(d)!]));
    const loadOrder = ordered.map((m) => m.path).filter((p) => all.has(p));
    byName.set(name, loadOrder);
    ordered.push({ path: relative(moduleDir, ko), deps: [...loadOrder].reverse() });
  };
  for (const n of names) visit(norm(n), []);
  return ordered;
}
