// agent/undici.ts imports undici's modules by path (its index loads far more than the agent uses), and those
// paths are undici's internals, free to move in any release: package.json pins undici exactly, and this checks
// that every path the agent imports still resolves to what agent/undici.ts expects of it.
import { readFileSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createRequire } from 'node:module';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Agent, proxyPool, request } from '../../agent/undici.ts';

const ROOT = resolve(import.meta.dirname, '..', '..');
const require = createRequire(resolve(ROOT, 'agent', 'undici.ts'));

describe("undici's modules imported by path", () => {
  it('undici is pinned to one exact version, and that version is the one installed', () => {
    const pkg = JSON.parse(readFileSync(resolve(ROOT, 'package.json'), 'utf8')) as {
      dependencies: Record<string, string>;
    };
    const pinned = pkg.dependencies.undici;
    expect(pinned).toMatch(/^\d+\.\d+\.\d+$/);
    expect((require('undici/package.json') as { version: string }).version).toBe(pinned);
  });

  it('every path agent/undici.ts imports is there and exports what the agent uses', () => {
    const source = readFileSync(resolve(ROOT, 'agent', 'undici.ts'), 'utf8');
    const paths = [...source.matchAll(/from '(undici\/lib\/[^']+)'/g)].map((m) => m[1]!);
    expect(paths.sort()).toEqual([
      'undici/lib/api/index.js',
      'undici/lib/dispatcher/agent.js',
      'undici/lib/dispatcher/pool.js',
      'undici/lib/dispatcher/proxy-agent.js',
      'undici/lib/interceptor/redirect.js',
    ]);
    const api = require('undici/lib/api/index.js') as Record<string, unknown>;
    expect(typeof api.request).toBe('function');
    expect(typeof api.connect).toBe('function');
    for (const cls of ['agent', 'pool', 'proxy-agent']) {
      const Class = require(`undici/lib/dispatcher/${cls}.js`) as { prototype: { dispatch?: unknown } };
      expect(typeof Class.prototype.dispatch).toBe('function');
    }
    expect(typeof require('undici/lib/interceptor/redirect.js')).toBe('function');
  });

  it("leaves Dispatcher.prototype alone, and still requests and tunnels through undici's API functions", async () => {
    const agent = new Agent();
    expect('request' in agent).toBe(false);
    expect('connect' in agent).toBe(false);
    const pool = proxyPool(new URL('http://127.0.0.1:1'), { connect: () => undefined });
    expect(typeof pool.connect).toBe('function');
    await pool.close();

    const server = createServer((_req, res) => res.end('answered'));
    await new Promise<void>((done) => server.listen(0, '127.0.0.1', done));
    try {
      const { port } = server.address() as AddressInfo;
      const res = await request(`http://127.0.0.1:${port}/x?y=1`, { method: 'GET', dispatcher: agent });
      expect(res.statusCode).toBe(200);
      expect(await res.body.text()).toBe('answered');
    } finally {
      await agent.close();
      await new Promise((done) => server.close(done));
    }
  });
});
