// The node's identifier as the conductor or the inspection callback names it. It ends up in a URL path
// (the heartbeat, with the agent token) and in lookup's query, so it is checked where it enters: a UUID,
// or a node name as Ironic allows one (RFC 3986 unreserved characters), never a path of its own.

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const NAME = /^[A-Za-z0-9._~-]+$/;
/** Ironic's node name column is 255 characters; a UUID is 36. */
export const MAX_NODE_IDENT = 255;

/** Why `v` cannot name a node, or undefined when it can. */
export function nodeIdentProblem(v: unknown): string | undefined {
  if (typeof v !== 'string') return `is ${v === null ? 'null' : typeof v}, not a string`;
  if (v === '') return 'is empty';
  if (v.length > MAX_NODE_IDENT) return `is ${v.length} characters long (at most ${MAX_NODE_IDENT})`;
  if (UUID.test(v)) return undefined;
  if (!NAME.test(v) || v === '.' || v === '..') return `${JSON.stringify(v)} is neither a UUID nor a node name`;
  return undefined;
}
