// The tree passes the linter and is formatted (Biome, biome.json: 120 columns): run in every `npm test`, so CI
// holds it to it. `npx biome format --write` fixes the formatting.
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { expect, it } from 'vitest';

const root = join(import.meta.dirname, '..', '..');

it('biome check (lint and format) finds nothing in agent/, scripts/, test/ and image-build/', () => {
  const biome = join(root, 'node_modules/@biomejs/biome/bin/biome');
  const r = spawnSync(process.execPath, [biome, 'check', '--error-on-warnings', '--max-diagnostics=50'], {
    cwd: root,
    encoding: 'utf8',
  });
  const out = `${r.stdout}${r.stderr}`;
  expect(r.status, out).toBe(0);
  expect(out).toMatch(/Checked \d+ files/);
});
