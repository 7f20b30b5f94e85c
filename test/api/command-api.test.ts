// Black-box tests of the command API over real HTTP on loopback, against agent-api.md §1–§2.
import { createHash } from 'node:crypto';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { command, type Extension } from '../../agent/commands/types.ts';
import { CleaningError, InvalidCommandParamsError, VersionMismatch } from '../../agent/errors.ts';
import { call, startAgent, type RunningAgent } from '../helpers/api-harness.ts';

/** A gate an async test command waits on, so a test decides when it finishes. */
function gate() {
  let open!: () => void;
  const opened = new Promise<void>((resolve) => (open = resolve));
  return { open, opened };
}

let release = gate();

const testExtension: Extension = {
  echo: command({ mode: 'sync', parse: (p) => String(p.value ?? ''), run: (v) => v }),
  nothing: command({ mode: 'sync', parse: () => undefined, run: () => null }),
  typed: command({ mode: 'sync', parse: () => undefined, run: () => ({ a: [1, 'é'] }) }),
  boom: command({
    mode: 'sync',
    parse: () => undefined,
    run: () => {
      throw new TypeError('got an unexpected keyword argument');
    },
  }),
  clean_fail: command({
    mode: 'sync',
    parse: () => undefined,
    run: () => {
      throw new CleaningError('disk on fire');
    },
  }),
  strict: command({
    mode: 'sync',
    parse: (p) => {
      if (typeof p.size !== 'number') throw new InvalidCommandParamsError("'size' must be a number");
      return p.size;
    },
    run: (n) => n * 2,
  }),
  slow: command({
    mode: 'async',
    parse: () => undefined,
    run: async (_p, ctx) => {
      ctx.progress({ phase: 'waiting', bytes_done: 1 });
      await release.opened;
      return 'done';
    },
  }),
  slow_fail: command({
    mode: 'async',
    parse: () => undefined,
    run: async () => {
      await release.opened;
      throw new Error('it broke');
    },
  }),
  mismatch: command({
    mode: 'async',
    parse: () => undefined,
    run: () => {
      throw new VersionMismatch('expected 1.1, got 1.0');
    },
  }),
};

const registry = { test: testExtension };

const post = (base: string, name: string, params: unknown = {}, query = '') =>
  call(`${base}/v1/commands/${query}`, { method: 'POST', body: JSON.stringify({ name, params }) });

describe('a standalone agent', () => {
  let a: RunningAgent;
  beforeEach(async () => {
    release = gate();
    a = await startAgent({}, registry);
  });
  afterEach(async () => {
    release.open();
    await a.close();
  });

  describe('routes and documents', () => {
    it('serves the root, v1 and status documents', async () => {
      const root = await call(`${a.url}/`);
      expect(root.status).toBe(200);
      expect(root.headers.get('content-type')).toBe('application/json');
      expect(root.json.name).toBe('OpenStack Ironic Python Agent API');
      expect(root.json.default_version.links[0]).toEqual({ href: `${a.url}/v1`, rel: 'self' });
      expect(root.text).toContain('", "');

      const v1 = await call(`${a.url}/v1/`);
      expect(v1.json.commands[0].href).toBe(`${a.url}/v1/commands`);
      expect(v1.json.status[1]).toEqual({ href: `${a.url}/status`, rel: 'bookmark' });

      for (const path of ['/v1/status', '/status', '//v1//status']) {
        const st = await call(`${a.url}${path}`);
        expect(st.status).toBe(200);
        expect(Object.keys(st.json)).toEqual(['started_at', 'version']);
        expect(typeof st.json.started_at).toBe('number');
        expect(st.json.started_at).toBeCloseTo(Date.now() / 1000, -2);
        expect(st.json.version).toMatch(/^\d+\.\d+\.\d+/);
      }
      const head = await call(`${a.url}/v1/status`, { method: 'HEAD' });
      expect(head.status).toBe(200);
      expect(head.text).toBe('');
    });

    it('redirects slash-less forms with 308 and an absolute Location, keeping the query', async () => {
      const v1 = await call(`${a.url}/v1`);
      expect(v1.status).toBe(308);
      expect(v1.headers.get('location')).toBe(`${a.url}/v1/`);
      expect(v1.headers.get('content-type')).toBe('text/html; charset=utf-8');

      const list = await call(`${a.url}/v1/commands?agent_token=x`);
      expect(list.status).toBe(308);
      expect(list.headers.get('location')).toBe(`${a.url}/v1/commands/?agent_token=x`);
      expect((await call(`${a.url}/commands`)).headers.get('location')).toBe(`${a.url}/commands/`);

      // Method and body survive the redirect.
      const res = await fetch(`${a.url}/v1/commands?wait=true`, {
        method: 'POST',
        body: JSON.stringify({ name: 'test.echo', params: { value: 'hi' } }),
        redirect: 'follow',
      });
      expect(res.status).toBe(200);
      expect(((await res.json()) as { command_result: unknown }).command_result).toEqual({ result: 'hi' });
    });

    it('answers 404 and 405 exactly as IPA does', async () => {
      for (const path of ['/v1/foo', '/v1/status/', '/v2/', '/v1/commands/abc/']) {
        const r = await call(`${a.url}${path}`);
        expect(r.status, path).toBe(404);
        expect(r.json).toEqual({
          faultcode: 'Client',
          faultstring:
            '404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.',
        });
      }
      const del = await call(`${a.url}/v1/commands/`, { method: 'DELETE' });
      expect(del.status).toBe(405);
      expect(del.headers.get('allow')).toBe('HEAD, GET, POST');
      expect(del.json.faultstring).toBe('405 Method Not Allowed: The method is not allowed for the requested URL.');
      const opt = await call(`${a.url}/v1/status`, { method: 'OPTIONS' });
      expect(opt.status).toBe(405);
      expect(opt.headers.get('allow')).toBe('HEAD, GET');
      expect((await call(`${a.url}/v1/status`, { method: 'POST' })).status).toBe(405);
    });
  });

  describe('commands', () => {
    it('returns every error of the table with its status and faultstring', async () => {
      const cases: [string | undefined, number, string | RegExp][] = [
        ['{not json', 400, /^400 Bad Request: Failed to decode JSON object: /],
        ['', 400, /^400 Bad Request: Failed to decode JSON object: /],
        ['{}', 400, '400 Bad Request: Missing or invalid name or params'],
        ['[]', 400, '400 Bad Request: Missing or invalid name or params'],
        ['"x"', 400, '400 Bad Request: Missing or invalid name or params'],
        ['null', 400, '400 Bad Request: Missing or invalid name or params'],
        ['{"name": "test.echo", "params": []}', 400, '400 Bad Request: Missing or invalid name or params'],
        ['{"name": "test.echo"}', 400, '400 Bad Request: Missing or invalid name or params'],
        [
          '{"name": "nodot", "params": {}}',
          400,
          'Invalid command: Command name must be of the form <extension>.<name>',
        ],
        [
          '{"name": "bad_extension.fake_command", "params": {}}',
          404,
          'Not found: Extension with id bad_extension not found.',
        ],
        ['{"name": "test.nope", "params": {}}', 400, 'Invalid command: Unknown command: nope'],
        // Names from the JavaScript prototype chain are unknown commands like any other.
        ['{"name": "constructor.keys", "params": {}}', 404, 'Not found: Extension with id constructor not found.'],
        ['{"name": "__proto__.toString", "params": {}}', 404, 'Not found: Extension with id __proto__ not found.'],
        ['{"name": "test.constructor", "params": {}}', 400, 'Invalid command: Unknown command: constructor'],
        ['{"name": "test.__proto__", "params": {}}', 400, 'Invalid command: Unknown command: __proto__'],
        ['{"name": "test.hasOwnProperty", "params": {}}', 400, 'Invalid command: Unknown command: hasOwnProperty'],
        [
          '{"name": "test.strict", "params": {"size": "x"}}',
          400,
          "Invalid command parameters: 'size' must be a number",
        ],
      ];
      for (const [body, status, text] of cases) {
        const r = await call(`${a.url}/v1/commands/`, { method: 'POST', body });
        expect(r.status, body).toBe(status);
        expect(Object.keys(r.json)).toEqual(['faultcode', 'faultstring']);
        expect(r.json.faultcode).toBe('Client');
        if (typeof text === 'string') expect(r.json.faultstring).toBe(text);
        else expect(r.json.faultstring).toMatch(text);
      }
      const missing = await call(`${a.url}/v1/commands/no-such-id`);
      expect(missing.status).toBe(404);
      expect(missing.json.faultstring).toBe('Not found: Command Result with id no-such-id not found.');
      // None of the refused commands was recorded.
      expect((await call(`${a.url}/v1/commands/`)).json).toEqual({ commands: [] });
    });

    it('runs sync commands at once and wraps their results', async () => {
      const r = await post(a.url, 'test.echo', { value: 'hello', extra: 1 });
      expect(r.status).toBe(200);
      expect(Object.keys(r.json)).toEqual(['id', 'command_name', 'command_status', 'command_error', 'command_result']);
      expect(r.json).toMatchObject({
        command_name: 'echo',
        command_status: 'SUCCEEDED',
        command_error: null,
        command_result: { result: 'hello' },
      });
      expect((await post(a.url, 'test.nothing')).json.command_result).toBeNull();
      const typed = await post(a.url, 'test.typed');
      expect(typed.json.command_result).toEqual({ a: [1, 'é'] });
      expect(typed.text).toContain('\\u00e9');
      const list = await call(`${a.url}/v1/commands/`);
      expect(list.json.commands.map((c: { command_name: string }) => c.command_name)).toEqual([
        'echo',
        'nothing',
        'typed',
      ]);
      const one = await call(`${a.url}/v1/commands/${r.json.id}`);
      expect(one.json).toEqual(r.json);
      expect((await call(`${a.url}/commands/${r.json.id}`)).json).toEqual(r.json);
    });

    it('records failing sync commands as FAILED results under their dotted name', async () => {
      const boom = await post(a.url, 'test.boom');
      expect(boom.status).toBe(200);
      expect(boom.json).toMatchObject({ command_name: 'test.boom', command_status: 'FAILED', command_result: null });
      expect(boom.json.command_error).toEqual({
        type: 'TypeError',
        code: 500,
        message: 'Command execution failed',
        details: 'got an unexpected keyword argument',
      });
      const cf = await post(a.url, 'test.clean_fail');
      expect(cf.json.command_error).toEqual({
        type: 'CleaningError',
        code: 500,
        message: 'Clean step failed',
        details: 'disk on fire',
      });
      // Unlike IPA, the failure poisons nothing: the list still serializes.
      const list = await call(`${a.url}/v1/commands/`);
      expect(list.status).toBe(200);
      expect(list.json.commands).toHaveLength(2);
    });

    it('runs async commands in the background, reports progress, and waits only when asked', async () => {
      const started = await post(a.url, 'test.slow', {}, '?wait=false');
      expect(started.json).toMatchObject({ command_name: 'slow', command_status: 'RUNNING', command_error: null });
      expect(started.json.command_result).toEqual({ phase: 'waiting', bytes_done: 1 });

      const busy = await post(a.url, 'test.echo', { value: 'x' });
      expect(busy.status).toBe(409);
      expect(busy.json).toEqual({ faultcode: 'Client', faultstring: 'Agent is busy: executing command slow' });
      // Name format is checked before busy; the extension is looked up after.
      expect((await post(a.url, 'nodot')).status).toBe(400);
      expect((await post(a.url, 'nosuch.thing')).status).toBe(409);

      const waiting = call(`${a.url}/v1/commands/${started.json.id}?wait=TRUE`);
      const stillRunning = await call(`${a.url}/v1/commands/${started.json.id}?wait=yes`);
      expect(stillRunning.json.command_status).toBe('RUNNING');
      release.open();
      const done = await waiting;
      expect(done.json).toMatchObject({ command_status: 'SUCCEEDED', command_result: { result: 'slow: done' } });

      const waited = await post(a.url, 'test.slow', {}, '?wait=true');
      expect(waited.json.command_status).toBe('SUCCEEDED');
    });

    it('wraps async failures and reports version mismatches', async () => {
      release.open();
      const failed = await post(a.url, 'test.slow_fail', {}, '?wait=true');
      expect(failed.json.command_status).toBe('FAILED');
      expect(failed.json.command_name).toBe('slow_fail');
      expect(failed.json.command_error).toEqual({
        type: 'CommandExecutionError',
        code: 500,
        message: 'Command execution failed',
        details: 'it broke',
      });
      const mm = await post(a.url, 'test.mismatch', {}, '?wait=true');
      expect(mm.json.command_status).toBe('CLEAN_VERSION_MISMATCH');
      expect(mm.json.command_error).toMatchObject({ type: 'VersionMismatch', code: 409 });
    });

    it('lets exactly one of two concurrent async POSTs win', async () => {
      const [x, y] = await Promise.all([post(a.url, 'test.slow'), post(a.url, 'test.slow')]);
      expect([x.status, y.status].sort()).toEqual([200, 409]);
      const list = await call(`${a.url}/v1/commands/`);
      expect(list.json.commands).toHaveLength(1);
      expect(list.json.commands[0].command_status).toBe('RUNNING');
    });

    it('serializes concurrent sync commands and records them all', async () => {
      const results = await Promise.all(
        Array.from({ length: 8 }, (_, i) => post(a.url, 'test.echo', { value: String(i) })),
      );
      expect(results.every((r) => r.status === 200)).toBe(true);
      const list = await call(`${a.url}/v1/commands/`);
      expect(
        list.json.commands.map((c: { command_result: { result: string } }) => c.command_result.result).sort(),
      ).toEqual(['0', '1', '2', '3', '4', '5', '6', '7']);
    });
  });
});

describe('agent token', () => {
  const TOKEN = 'tok-0123456789abcdef0123456789abcdef';
  let a: RunningAgent | undefined;
  afterEach(async () => {
    await a?.close();
    a = undefined;
  });

  it('requires the token on POST, checked before the body is parsed', async () => {
    a = await startAgent({ 'ipa-agent-token': TOKEN }, registry);
    const cases = ['', '?agent_token=wrong', `?agent_token=&agent_token=${TOKEN}`];
    for (const q of cases) {
      const r = await call(`${a.url}/v1/commands/${q}`, { method: 'POST', body: '{not json' });
      expect(r.status, q).toBe(401);
      expect(r.json).toEqual({ faultcode: 'Client', faultstring: '401 Unauthorized: Token invalid.' });
      expect(r.headers.get('www-authenticate')).toBeNull();
    }
    const ok = await post(a.url, 'test.echo', { value: 'v' }, `?agent_token=${TOKEN}&agent_token=other`);
    expect(ok.status).toBe(200);
    // The redirect comes before the token check.
    expect((await call(`${a.url}/v1/commands`, { method: 'POST', body: '{}' })).status).toBe(308);
  });

  it('keeps GET open until a GET carries the token, then requires it (a conductor older than 1.96)', async () => {
    a = await startAgent(
      { standalone: 'false', 'ipa-api-url': 'http://127.0.0.1:9', 'ipa-agent-token': TOKEN },
      registry,
    );
    const ran = await post(a.url, 'test.echo', { value: 'v' }, `?agent_token=${TOKEN}`);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(200);
    expect((await call(`${a.url}/v1/commands/${ran.json.id}`)).status).toBe(200);
    expect((await call(`${a.url}/v1/commands/?agent_token=wrong`)).status).toBe(401);
    // A wrong token does not switch the rule on; the right one does.
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(200);
    expect((await call(`${a.url}/v1/commands/?agent_token=${TOKEN}`)).status).toBe(200);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(401);
    expect((await call(`${a.url}/commands/${ran.json.id}`)).status).toBe(401);
    expect((await call(`${a.url}/v1/commands/${ran.json.id}?agent_token=${TOKEN}`)).status).toBe(200);
    // Status stays open.
    expect((await call(`${a.url}/v1/status`)).status).toBe(200);
  });

  it('requires the token on GET from the start with --ipa-require-token-on-get', async () => {
    a = await startAgent({ 'ipa-agent-token': TOKEN, 'ipa-require-token-on-get': 'true' }, registry);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(401);
    expect((await call(`${a.url}/v1/commands/?agent_token=${TOKEN}`)).json).toEqual({ commands: [] });
  });

  it("requires a standalone agent's token on GET from the start, as IPA's functional test expects", async () => {
    a = await startAgent({ 'ipa-agent-token': TOKEN }, registry);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(401);
    expect((await call(`${a.url}/v1/commands/?agent_token=${TOKEN}`)).json).toEqual({ commands: [] });
    expect((await call(`${a.url}/v1/status`)).status).toBe(200);
  });

  it('refuses every command call while a conductor-linked agent holds no token', async () => {
    a = await startAgent({ standalone: 'false', 'ipa-api-url': 'http://127.0.0.1:9' }, registry);
    expect((await call(`${a.url}/v1/commands/`)).status).toBe(401);
    expect((await post(a.url, 'test.echo')).status).toBe(401);
    expect((await call(`${a.url}/v1/status`)).status).toBe(200);
  });

  it('serves a standalone agent without a token', async () => {
    a = await startAgent({}, registry);
    expect((await post(a.url, 'test.echo', { value: 'x' })).status).toBe(200);
    expect((await call(`${a.url}/v1/commands/`)).json.commands).toHaveLength(1);
  });
});

describe('the step a command echoes', () => {
  /** An in-band step runner as the deploy/clean/service extensions are: it echoes the step it was sent. */
  const steps = {
    deploy: {
      execute_deploy_step: command({
        mode: 'async',
        parse: (p) => p.step as Record<string, unknown>,
        run: (step) => ({ deploy_result: null, deploy_step: step }),
      }),
    },
  };
  let a: RunningAgent | undefined;
  afterEach(async () => {
    await a?.close();
    a = undefined;
  });

  it('keeps interface and step, and replaces large string args by their size and sha256, once', async () => {
    a = await startAgent({}, steps);
    const configdrive = 'H4sI'.padEnd(8 * 1024 * 1024, 'x');
    const sha = createHash('sha256').update(configdrive).digest('hex');
    const url = `http://127.0.0.1:8080/${'p'.repeat(300)}`;
    const step = {
      interface: 'deploy',
      step: 'write_image',
      args: { image_info: { id: 'disk.img', urls: [url], configdrive, stream_raw_images: true }, configdrive },
    };
    const r = await post(a.url, 'deploy.execute_deploy_step', { step }, '?wait=true');
    expect(r.status).toBe(200);
    const omitted = `<${8 * 1024 * 1024} bytes omitted, sha256 ${sha}>`;
    const echoed = {
      interface: 'deploy',
      step: 'write_image',
      args: {
        image_info: { id: 'disk.img', urls: [url], configdrive: omitted, stream_raw_images: true },
        configdrive: omitted,
      },
    };
    expect(r.json.command_result).toEqual({ deploy_result: null, deploy_step: echoed });
    const list = await call(`${a.url}/v1/commands/`);
    expect(list.text.length).toBeLessThan(4096);
    expect(list.json.commands[0].command_result.deploy_step).toEqual(echoed);
    // Recorded that way: the 8 MiB string is not kept to be cut again on every GET.
    expect(a.agent.executor.list()[0]!.result).toEqual({ deploy_result: null, deploy_step: echoed });
  });

  it('echoes a string of up to 4 KiB as it came, and leaves other commands and results alone', async () => {
    a = await startAgent({}, { ...steps, ...registry });
    const edge = 'é'.repeat(2048);
    const step = { interface: 'deploy', step: 'inject_files', args: { files: [{ path: '/etc/x', content: edge }] } };
    const r = await post(a.url, 'deploy.execute_deploy_step', { step }, '?wait=true');
    expect(r.json.command_result.deploy_step).toEqual(step);
    const big = 'y'.repeat(64 * 1024);
    expect((await post(a.url, 'test.echo', { value: big })).json.command_result).toEqual({ result: big });
  });
});
