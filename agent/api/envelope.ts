// HTTP responses: JSON bodies with IPA's content type, and the `{faultcode, faultstring}` envelope.
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { AgentError } from '../errors.ts';
import { pyJson } from './json.ts';

export function jsonResponse(c: Context, body: unknown, status: ContentfulStatusCode = 200): Response {
  return c.body(pyJson(body), status, { 'Content-Type': 'application/json' });
}

export function fault(c: Context, status: number, faultstring: string, headers: Record<string, string> = {}): Response {
  const body = { faultcode: status >= 500 ? 'Server' : 'Client', faultstring };
  return c.body(pyJson(body), status as ContentfulStatusCode, { ...headers, 'Content-Type': 'application/json' });
}

export function faultFromError(c: Context, err: unknown): Response {
  if (err instanceof AgentError) return fault(c, err.code, err.faultstring);
  return fault(c, 500, err instanceof Error ? err.message : String(err));
}

export const FAULTS = {
  token: '401 Unauthorized: Token invalid.',
  shape: '400 Bad Request: Missing or invalid name or params',
  notFound:
    '404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.',
  method: '405 Method Not Allowed: The method is not allowed for the requested URL.',
  tooLarge: '413 Request Entity Too Large: The data value transmitted exceeds the capacity limit.',
  badJson: (why: string) => `400 Bad Request: Failed to decode JSON object: ${why}`,
} as const;
