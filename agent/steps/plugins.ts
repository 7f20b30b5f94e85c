// Hardware managers an operator adds without forking the agent: the files of one folder (`ina-hardware-managers`,
// in the ramdisk /etc/ironic-node-agent/hardware-managers, filled by image-build/), taken in name order:
// - `*.mjs` / `*.js`: an ES module exporting `manager` (or a default export), a HardwareManager (step.ts);
// - `*.json`: a manifest of executable steps (executable.ts).
// Other files (the manifests' programs, notes) are left alone. A plugin that cannot be read, loaded or checked
// is left out with its reason; the agent serves the rest.
import { open, readdir, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';
import { errorText } from '../errors.ts';
import { nullLogger, type Logger } from '../log.ts';
import { genericManager } from './builtin.ts';
import { StepCatalogue, type PluginFailure } from './catalogue.ts';
import { managerFromManifest } from './executable.ts';

const MAX_MANIFEST_BYTES = 64 * 1024;
const MAX_MODULE_BYTES = 4 * 1024 * 1024;
const MAX_PLUGINS = 100;
/** A module whose loading (its top-level code) takes longer is left out: the agent must come up. */
const MODULE_LOAD_MS = 30_000;

async function readBounded(path: string, limit: number): Promise<string> {
  const file = await open(path, 'r');
  try {
    const buf = Buffer.alloc(limit + 1);
    let got = 0;
    while (got <= limit) {
      const { bytesRead } = await file.read(buf, got, buf.length - got, got);
      if (bytesRead === 0) break;
      got += bytesRead;
    }
    if (got > limit) throw new Error(`larger than ${limit} bytes`);
    return buf.subarray(0, got).toString('utf8');
  } finally {
    await file.close();
  }
}

async function loadModule(path: string): Promise<unknown> {
  const size = (await stat(path)).size;
  if (size > MAX_MODULE_BYTES) throw new Error(`larger than ${MAX_MODULE_BYTES} bytes`);
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`not loaded within ${MODULE_LOAD_MS / 1000} s`)), MODULE_LOAD_MS);
  });
  try {
    const mod = (await Promise.race([import(pathToFileURL(path).href), late])) as Record<string, unknown>;
    const manager = mod.manager ?? mod.default;
    if (manager === undefined) throw new Error('exports neither `manager` nor a default');
    return manager;
  } finally {
    clearTimeout(timer);
  }
}

/** The plugins of `dir`, each a manager or the reason it is none. A missing folder has none. */
export async function loadPlugins(
  dir: string,
  log: Logger,
): Promise<{ managers: { source: string; manager: unknown }[]; failures: PluginFailure[] }> {
  const managers: { source: string; manager: unknown }[] = [];
  const failures: PluginFailure[] = [];
  let names: string[];
  try {
    names = (await readdir(dir, { withFileTypes: true }))
      .filter((e) => e.isFile() && !e.name.startsWith('.') && /\.(mjs|js|json)$/.test(e.name))
      .map((e) => e.name)
      .sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
      log.info({ dir }, 'no hardware manager plugins (no such folder)');
    } else {
      failures.push({ source: dir, reason: `the plugin folder cannot be read: ${errorText(err)}` });
    }
    return { managers, failures };
  }
  if (names.length > MAX_PLUGINS) {
    failures.push({ source: dir, reason: `${names.length} plugins: only the first ${MAX_PLUGINS} are taken` });
    names = names.slice(0, MAX_PLUGINS);
  }
  for (const name of names) {
    const source = join(dir, name);
    try {
      if (name.endsWith('.json')) {
        let manifest: unknown;
        try {
          manifest = JSON.parse(await readBounded(source, MAX_MANIFEST_BYTES));
        } catch (err) {
          throw new Error(`not a readable JSON manifest: ${errorText(err)}`);
        }
        const manager = managerFromManifest(manifest, dir);
        if (typeof manager === 'string') throw new Error(manager);
        managers.push({ source, manager });
      } else {
        managers.push({ source, manager: await loadModule(source) });
      }
    } catch (err) {
      failures.push({ source, reason: errorText(err) });
    }
  }
  return { managers, failures };
}

/**
 * The built-in manager (with `inject_files` at `injectFilesPriority`) and, with `dir`, the plugins in it, merged
 * (catalogue.ts). Never rejects.
 */
export async function loadCatalogue(
  dir: string | undefined,
  log: Logger,
  injectFilesPriority = 0,
): Promise<StepCatalogue> {
  const plugins = dir ? await loadPlugins(dir, log) : { managers: [], failures: [] };
  return StepCatalogue.build(
    [{ source: 'built-in', manager: genericManager(injectFilesPriority) }, ...plugins.managers],
    plugins.failures,
    log,
  );
}

/** The built-in manager alone. */
export function builtinCatalogue(): Promise<StepCatalogue> {
  return loadCatalogue(undefined, nullLogger);
}
