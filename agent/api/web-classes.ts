// Hono answers with the web-standard Request, Response and Headers, and @hono/node-server reads those globals
// (and CloseEvent) when it is loaded. Node's own are lazy: the first read loads Node's private copy of undici,
// node:http2 with it, a second HTTP stack beside the undici 8 the agent already carries. So the globals become
// undici 8's classes, read from the modules that define them (docs/runtime.md, "Memory on Node 24").
// This module is the first import of every module that uses Hono, so that it runs before Hono reads them.
// Order matters below: request.js captures the body converter that response.js defines.
import { Headers } from 'undici/lib/web/fetch/headers.js';
import { Response } from 'undici/lib/web/fetch/response.js';
import { Request } from 'undici/lib/web/fetch/request.js';
import { CloseEvent } from 'undici/lib/web/websocket/events.js';

Object.assign(globalThis, { Headers, Response, Request, CloseEvent });
