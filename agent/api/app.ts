// The agent's HTTP API: IPA's route table, with its redirects, 404/405 rules and check order.
import { Hono, type Context } from 'hono';
import { realClock, type Clock } from '../clock.ts';
import type { CommandExecutor } from '../commands/executor.ts';
import { AgentError, RequestedObjectNotFoundError } from '../errors.ts';
import type { Logger } from '../log.ts';
import type { AgentState } from '../state.ts';
import { rootDocument, v1Document } from './documents.ts';
import { FAULTS, fault, faultFromError, jsonResponse } from './envelope.ts';
import { BodyReader, BodyTooLarge, BodyTooSlow } from './body-limit.ts';
import { JsonRefused, parseBoundedJson } from '../bounded-json.ts';
import { isObject } from '../parse.ts';
import { requestLog } from './request-log.ts';
import { tokenCheck, type TokenPolicy } from './token.ts';

export interface ApiDeps {
  executor: CommandExecutor;
  state: AgentState;
  log: Logger;
  tokenPolicy: TokenPolicy;
  /** What a request body's minimum rate is measured on. */
  clock?: Clock;
}

/** Werkzeug's words for a request whose body did not arrive in time (IPA has no such limit). */
const REQUEST_TIMEOUT =
  "408 Request Timeout: The server closed the network connection because the browser didn't finish the request within the specified time.";

type Handler = (c: Context) => Response | Promise<Response>;

interface Route {
  path: string;
  method: 'GET' | 'POST';
  guarded: boolean;
  handler: Handler;
}

/** Slash-less forms answer 308 to the canonical one (before any token check), keeping method and body. */
const REDIRECTS: Record<string, { to: string; methods: string[] }> = {
  '/v1': { to: '/v1/', methods: ['GET', 'HEAD'] },
  '/v1/commands': { to: '/v1/commands/', methods: ['GET', 'HEAD', 'POST'] },
  '/commands': { to: '/commands/', methods: ['GET', 'HEAD', 'POST'] },
};

function mergeSlashes(url: string): string {
  const start = url.indexOf('/', url.indexOf('://') + 3);
  const end = url.indexOf('?', start);
  const path = end < 0 ? url.slice(start) : url.slice(start, end);
  return path.replace(/\/{2,}/g, '/');
}

function origin(c: Context): string {
  const proto = new URL(c.req.url).protocol;
  return `${proto}//${c.req.header('host') ?? new URL(c.req.url).host}`;
}

function redirect(c: Context, target: string): Response {
  const query = new URL(c.req.url).search;
  const location = `${origin(c)}${target}${query}`;
  const html =
    '<!doctype html>\n<html lang=en>\n<title>Redirecting...</title>\n<h1>Redirecting...</h1>\n' +
    `<p>You should be redirected automatically to the target URL: <a href="${location}">${location}</a>. If not, click the link.\n`;
  return c.body(html, 308, { Location: location, 'Content-Type': 'text/html; charset=utf-8' });
}

function pathPattern(path: string): RegExp {
  return new RegExp(`^${path.replace(/:[a-z]+/g, '[^/]+')}$`);
}

function waitRequested(c: Context): boolean {
  return (c.req.query('wait') ?? '').toLowerCase() === 'true';
}

export function createApp(deps: ApiDeps): Hono {
  const { executor, state } = deps;
  const bodies = new BodyReader(deps.clock ?? realClock);

  const listCommands: Handler = (c) => jsonResponse(c, { commands: executor.list() });

  const getCommand: Handler = async (c) => {
    const id = c.req.param('id') ?? '';
    const record = executor.find(id);
    if (!record) throw new RequestedObjectNotFoundError('Command Result', id);
    if (waitRequested(c)) await record.done;
    return jsonResponse(c, record);
  };

  const postCommand: Handler = async (c) => {
    let parsed: { body: unknown } | { fault: string };
    try {
      parsed = await bodies.read(c, (text) => {
        try {
          return { body: parseBoundedJson(text) };
        } catch (err) {
          if (err instanceof JsonRefused) return { fault: FAULTS.badJson(err.message) };
          throw err;
        }
      });
    } catch (err) {
      if (err instanceof BodyTooLarge) return fault(c, 413, FAULTS.tooLarge, { Connection: 'close' });
      if (err instanceof BodyTooSlow) return fault(c, 408, REQUEST_TIMEOUT, { Connection: 'close' });
      throw err;
    }
    if ('fault' in parsed) return fault(c, 400, parsed.fault);
    const b = parsed.body;
    if (!isObject(b) || typeof b.name !== 'string' || !isObject(b.params)) return fault(c, 400, FAULTS.shape);
    const record = await executor.submit(b.name, b.params);
    if (waitRequested(c)) await record.done;
    return jsonResponse(c, record);
  };

  const status: Handler = (c) => jsonResponse(c, { started_at: state.status.startedAt, version: state.status.version });

  const routes: Route[] = [
    { path: '/', method: 'GET', guarded: false, handler: (c) => jsonResponse(c, rootDocument(origin(c))) },
    { path: '/v1/', method: 'GET', guarded: false, handler: (c) => jsonResponse(c, v1Document(origin(c))) },
  ];
  for (const prefix of ['/v1', '']) {
    routes.push(
      { path: `${prefix}/status`, method: 'GET', guarded: false, handler: status },
      { path: `${prefix}/commands/`, method: 'GET', guarded: true, handler: listCommands },
      { path: `${prefix}/commands/`, method: 'POST', guarded: true, handler: postCommand },
      { path: `${prefix}/commands/:id`, method: 'GET', guarded: true, handler: getCommand },
    );
  }

  const app = new Hono({ strict: true, getPath: (req) => mergeSlashes(req.url) });
  app.use('*', requestLog(deps.log));
  for (const [path, r] of Object.entries(REDIRECTS)) {
    app.on(r.methods, path, (c) => redirect(c, r.to));
  }
  const guard = tokenCheck(state, deps.tokenPolicy);
  for (const r of routes) {
    if (r.guarded) app.on(r.method, r.path, guard, r.handler);
    else app.on(r.method, r.path, r.handler);
  }

  // A known path with a method it does not take is 405 with Allow; anything else is 404.
  const patterns = routes.map((r) => ({ re: pathPattern(r.path), method: r.method }));
  app.notFound((c) => {
    const path = mergeSlashes(c.req.url);
    const methods = new Set<string>(patterns.filter((p) => p.re.test(path)).map((p) => p.method));
    const redirectRule = REDIRECTS[path];
    if (redirectRule) for (const m of redirectRule.methods) methods.add(m);
    if (methods.size === 0) return fault(c, 404, FAULTS.notFound);
    const allow = [...methods].filter((m) => m !== 'HEAD');
    if (allow.includes('GET')) allow.splice(allow.indexOf('GET'), 0, 'HEAD');
    return fault(c, 405, FAULTS.method, { Allow: allow.join(', ') });
  });
  app.onError((err, c) => {
    if (!(err instanceof AgentError)) deps.log.error({ err }, 'request failed');
    return faultFromError(c, err);
  });
  return app;
}
