// Hostile request bodies against the real command registry: nesting depth bounded where bodies are parsed,
// results of any depth still written, body sizes limited before buffering.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { command, type Extension } from '../../agent/commands/types.ts';
import { extensions } from '../../agent/commands/registry.ts';
import { call, startAgent, type RunningAgent } from '../helpers/api-harness.ts';

const nested = (depth: number, inner = '{}') => '['.repeat(depth) + inner + ']'.repeat(depth);
function deepValue(depth: number): unknown {
  let v: unknown = 'bottom';
  for (let i = 0; i < depth; i++) v = { down: v };
  return v;
}

const deepExt: Extension = {
  deep: command({ mode: 'sync', parse: () => undefined, run: () => deepValue(5000) }),
};

let a: RunningAgent;
beforeAll(async () => {
  a = await startAgent({}, { ...extensions, test: deepExt });
});
afterAll(async () => {
  await a.close();
});

describe('JSON nesting', () => {
  it('a body nested 100,000 levels deep is a 400 in the bad-JSON envelope, and the agent serves on', async () => {
    for (const body of [
      `{"name": "clean.execute_clean_step", "params": {"step": ${nested(100_000)}, "node": {}, "ports": []}}`,
      `{"name": "clean.execute_clean_step", "params": {"step": ${nested(100_000, '').slice(0, -5)}`,
      `{"name": "standby.prepare_image", "params": {"image_info": ${nested(65)}}}`,
    ]) {
      const r = await call(`${a.url}/v1/commands/`, { method: 'POST', body });
      expect(r.status).toBe(400);
      expect(r.json).toEqual({
        faultcode: 'Client',
        faultstring: '400 Bad Request: Failed to decode JSON object: nesting deeper than 64 levels',
      });
    }
    // Brackets inside strings do not count; 64 levels is still a body (refused by the command's own rules).
    const ok = await call(`${a.url}/v1/commands/`, {
      method: 'POST',
      body: `{"name": "clean.execute_clean_step", "params": {"step": ${nested(60, '"[[[[{{{{"')}}}`,
    });
    expect(ok.status).toBe(400);
    expect(ok.json.faultstring).not.toMatch(/nesting/);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(200);
  });

  it('a result nested 5,000 levels deep is written (cut with a marker), and listing the commands keeps working', async () => {
    const r = await call(`${a.url}/v1/commands/`, { method: 'POST', body: '{"name": "test.deep", "params": {}}' });
    expect(r.status).toBe(200);
    expect(r.text).toContain('<nested deeper than 256 levels, not shown>');
    const list = await call(`${a.url}/v1/commands/`);
    expect(list.status).toBe(200);
    expect(list.json.commands.at(-1).command_status).toBe('SUCCEEDED');
  });
});
