// One INFO line per request, like IPA's, but with the agent token masked.
import { getConnInfo } from '@hono/node-server/conninfo';
import type { Context, MiddlewareHandler } from 'hono';
import type { Logger } from '../log.ts';

export function maskToken(pathAndQuery: string): string {
  return pathAndQuery.replace(/([?&]agent_token=)[^&]*/g, '$1***');
}

function sourceIp(c: Context): string {
  const forwarded = c.req.header('x-forwarded-for')?.split(',')[0]?.trim();
  if (forwarded) return forwarded;
  const real = c.req.header('x-real-ip');
  if (real) return real;
  try {
    return getConnInfo(c).remote.address ?? '-';
  } catch {
    return '-';
  }
}

export function requestLog(log: Logger): MiddlewareHandler {
  return async (c, next) => {
    const started = performance.now();
    await next();
    const url = new URL(c.req.url);
    const ms = Math.round(performance.now() - started);
    log.info(`${sourceIp(c)} - ${c.req.method} ${maskToken(url.pathname + url.search)} - ${c.res.status} (${ms}ms)`);
  };
}
