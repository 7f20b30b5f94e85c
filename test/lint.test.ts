// The tree passes the linter (Biome, biome.json): run in every `npm test`, so CI holds it to it.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const root = join(import.meta.dirname, '..');

it('biome lint finds nothing in agent/, scripts/, test/ and image-build/', () => {
  const biome = join(root, 'node_modules/@biomejs/biome/bin/biome');
  const r = spawnSync(process.execPath, [biome, 'lint', '--error-on-warnings', '--max-diagnostics=50'], { cwd: root, encoding: 'utf8' });
  const out = `${r.stdout}${r.stderr}`;
  expect(r.status, out).toBe(0);
  expect(out).toMatch(/Checked \d+ files/);
});
