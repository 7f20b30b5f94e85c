// Stand-ins for tools that must never meet a host device (hdparm, nvme, blkdiscard): small Node scripts
// put first on PATH, which record every call (argv, one JSON line each) and act on a state folder the
// test prepares. The agent runs them exactly as it would run the real tools.
import { chmod, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface FakeTools {
  dir: string;
  /** Every recorded call of `tool`, as its argv after the tool's name. */
  calls(tool: string): Promise<string[][]>;
  close(): Promise<void>;
}

/** `scripts`: tool name → body of a CommonJS script with `args`, `state` (the folder) and `fs` in scope. */
export async function installFakes(scripts: Record<string, string>): Promise<FakeTools> {
  const dir = await mkdtemp(join(tmpdir(), 'ina-fake-'));
  for (const [name, body] of Object.entries(scripts)) {
    const prologue = [
      `#!${process.execPath}`,
      `const fs = require('node:fs'); const state = ${JSON.stringify(dir)}; const args = process.argv.slice(2);`,
      `fs.appendFileSync(state + '/${name}.calls', JSON.stringify(args) + '\\n');`,
    ].join('\n');
    await writeFile(join(dir, name), `${prologue}\n${body}\n`);
    await chmod(join(dir, name), 0o755);
  }
  const oldPath = process.env.PATH;
  process.env.PATH = `${dir}:${oldPath}`;
  return {
    dir,
    calls: async (tool) =>
      (await readFile(join(dir, `${tool}.calls`), 'utf8').catch(() => ''))
        .split('\n')
        .filter(Boolean)
        .map((l) => JSON.parse(l) as string[]),
    close: async () => {
      process.env.PATH = oldPath;
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** Runs `body` with PATH set to `path` (a folder of stand-ins, or none at all), then puts PATH back. */
export async function withPath<T>(path: string, body: () => Promise<T>): Promise<T> {
  const saved = process.env.PATH;
  process.env.PATH = path;
  try {
    return await body();
  } finally {
    process.env.PATH = saved;
  }
}
