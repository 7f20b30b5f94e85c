// The layering rule of docs/architecture.md, checked on the imports themselves: every module under agent/
// belongs to one layer, and an import (a type import too) never points to a higher layer. Extensions are
// reached only through the registry, so no extension leans on another one and nothing below commands/ calls
// into one. A file no layer names fails the check: a new folder takes its place in the table first.
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '..', '..', 'agent');

/** Bottom to top. A folder means every file under it; `name.ts` a top-level file of agent/. */
const LAYERS: readonly (readonly string[])[] = [
  // primitives every layer may use
  [
    'bounded-json.ts',
    'clock.ts',
    'lock.ts',
    'errors.ts',
    'log.ts',
    'parse.ts',
    'seeded-random.ts',
    'version.ts',
    'undici.ts',
    'progress.ts',
    'exec.ts',
    'lock.ts',
    'bounded-json.ts',
  ],
  // the machine and the agent's settings and state
  ['config/', 'host/', 'safety/', 'state.ts', 'services.ts'],
  // the work: disks, images, config drives, burn-ins
  ['disk/', 'image/', 'configdrive/', 'burnin/'],
  // the step table and hardware managers
  ['steps/'],
  // the command engine and its extensions
  ['commands/'],
  // the HTTP API
  ['api/'],
  // the process: the conductor link, inspection, the entry points and what they wire
  ['conductor/', 'inspect/', 'console/', 'netconf/', 'agent.ts', 'main.ts', 'last-words.ts', 'status-file.ts'],
];

function layerOf(file: string): number {
  const rel = relative(ROOT, file);
  const i = LAYERS.findIndex((units) => units.some((u) => (u.endsWith('/') ? rel.startsWith(u) : rel === u)));
  if (i < 0) throw new Error(`agent/${rel} is in no layer of test/project/layering.test.ts`);
  return i;
}

function sources(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const path = join(dir, e.name);
    if (e.isDirectory()) return sources(path);
    return e.name.endsWith('.ts') && !e.name.endsWith('.d.ts') ? [path] : [];
  });
}

/** Every relative import and re-export of `file` (static, dynamic, type-only), as absolute paths. */
function importsOf(file: string, text = readFileSync(file, 'utf8')): string[] {
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s+['"](\.[^'"]+)['"]/gm),
    ...text.matchAll(/^\s*import\s+['"](\.[^'"]+)['"]/gm),
    ...text.matchAll(/\bimport\(\s*['"](\.[^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specs.map((s) => resolve(dirname(file), s));
}

interface Edge {
  from: string;
  to: string;
}

function violations(edges: readonly Edge[]): string[] {
  const out: string[] = [];
  const name = (f: string) => `agent/${relative(ROOT, f)}`;
  for (const { from, to } of edges) {
    if (!to.startsWith(`${ROOT}/`)) continue;
    const [lf, lt] = [layerOf(from), layerOf(to)];
    if (lt > lf) out.push(`${name(from)} (layer ${lf}) imports ${name(to)} (layer ${lt})`);
    const ext = join(ROOT, 'commands', 'extensions');
    if (to.startsWith(`${ext}/`) && from !== join(ROOT, 'commands', 'registry.ts')) {
      out.push(`${name(from)} imports the extension ${name(to)}: extensions are reached through the registry`);
    }
  }
  return out;
}

/** The one process runner: no other module under agent/ starts a process, or imports what could. */
const RUNNER = join(ROOT, 'exec.ts');

/** Imports of `file` (type imports too) that start processes, when `file` is not the runner. */
function spawnImports(file: string, text = readFileSync(file, 'utf8')): string[] {
  if (file === RUNNER) return [];
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\b[^'"]*?\bfrom\s+['"]([^'"]+)['"]/gm),
    ...text.matchAll(/\b(?:import|require)\(\s*['"]([^'"]+)['"]\s*\)/g),
  ].map((m) => m[1]!);
  return specs
    .filter((s) => /^(?:node:)?child_process$|^execa(?:\/|$)/.test(s))
    .map((s) => `agent/${relative(ROOT, file)} imports ${s}: processes are started by agent/exec.ts`);
}

describe('layering of agent/', () => {
  it('no module imports a higher layer, and only the registry imports an extension', () => {
    const edges = sources(ROOT).flatMap((from) => importsOf(from).map((to) => ({ from, to })));
    expect(edges.length).toBeGreaterThan(300);
    expect(violations(edges)).toEqual([]);
  });

  it('only agent/exec.ts imports node:child_process or execa', () => {
    expect(sources(ROOT).flatMap((f) => spawnImports(f))).toEqual([]);
    const text = [
      "import type { ChildProcess } from 'node:child_process';",
      "import { execa } from 'execa';",
      "const { spawn } = require('child_process');",
      "import { readFile } from 'node:fs';",
    ].join('\n');
    expect(spawnImports(join(ROOT, 'image/example.ts'), text)).toEqual([
      'agent/image/example.ts imports node:child_process: processes are started by agent/exec.ts',
      'agent/image/example.ts imports execa: processes are started by agent/exec.ts',
      'agent/image/example.ts imports child_process: processes are started by agent/exec.ts',
    ]);
    expect(spawnImports(RUNNER, text)).toEqual([]);
  });

  it('catches an upward import, a type import, an extension import and an unplaced file', () => {
    const at = (p: string) => join(ROOT, p);
    const text = [
      "import type { CommandContext } from '../commands/types.ts';",
      "import { x } from './partitions.ts';",
      "export { y } from '../steps/step.ts';",
      "const m = await import('../api/app.ts');",
    ].join('\n');
    const edges = importsOf(at('disk/example.ts'), text).map((to) => ({ from: at('disk/example.ts'), to }));
    expect(violations(edges)).toEqual([
      'agent/disk/example.ts (layer 2) imports agent/commands/types.ts (layer 4)',
      'agent/disk/example.ts (layer 2) imports agent/steps/step.ts (layer 3)',
      'agent/disk/example.ts (layer 2) imports agent/api/app.ts (layer 5)',
    ]);
    expect(violations([{ from: at('commands/extensions/deploy.ts'), to: at('commands/extensions/clean.ts') }])).toEqual(
      [
        'agent/commands/extensions/deploy.ts imports the extension agent/commands/extensions/clean.ts: extensions are reached through the registry',
      ],
    );
    expect(() => violations([{ from: at('plugins/x.ts'), to: at('errors.ts') }])).toThrow(/in no layer/);
  });
});
