// Posting the inspection payload (IPA's `call_inspector`): JSON to each callback URL in turn, again while the
// answer is a connection failure, 409 or 5xx, waiting 5, 5, 6, 12, 24 and then 30 s between attempts (IPA's
// exponential backoff), within `ipa-inspection-timeout`. IPA stops after five attempts and leaves the process,
// which its supervisor restarts to inspect again; flow.ts repeats the round instead.
// Without a version header Ironic answers `{"uuid"}` (API 1.1, what IPA sends). With 1.84 or later it
// answers like lookup and creates the agent token at that moment, so the token must be kept from this
// reply: a later lookup only shows "******". The agent asks for 1.84 when it knows the conductor has it.
import type { Clock } from '../clock.ts';
import { ConductorUnreachable, ironicFault, type IronicApi } from '../conductor/ironic-api.ts';
import { InvalidLookupReply, parseLookupReply, type LookupReply } from '../conductor/lookup-reply.ts';
import { nodeIdentProblem } from '../conductor/node-ident.ts';
import { JsonRefused, parseBoundedJson } from '../bounded-json.ts';
import type { Logger } from '../log.ts';

export const V_INSPECTION_TOKEN = 84;
/** IPA's wait before attempt n + 1: 1.5 × 2^(n-1) s, at least 5 and at most 30. */
const waitS = (n: number) => Math.min(30, Math.max(5, 1.5 * 2 ** (n - 1)));

export type CallbackOutcome =
  | { kind: 'accepted'; status: number; nodeUuid?: string; lookup?: LookupReply; attempts: number }
  | { kind: 'refused'; status: number; reason: string; attempts: number }
  | { kind: 'failed'; reason: string; attempts: number };

export interface CallbackDeps {
  api: IronicApi;
  clock: Clock;
  log: Logger;
  signal?: AbortSignal;
}

/**
 * What an accepted reply tells: the node (and, at ≥ 1.84, lookup's config with the token). A node identifier
 * that is no UUID or node name is not used (`unusable` says why): lookup then goes by MAC alone, as when the
 * reply names no node, instead of sending it in a URL.
 */
function parseAccepted(text: string): { nodeUuid?: string; lookup?: LookupReply; unusable?: string } {
  if (text.trim() === '') return {};
  let doc: unknown;
  try {
    doc = parseBoundedJson(text);
  } catch (err) {
    if (err instanceof JsonRefused) return { unusable: `the reply is not usable JSON: ${err.message}` };
    throw err;
  }
  const body = doc as { uuid?: unknown; node?: unknown } | null;
  if (body?.node !== undefined) {
    try {
      const lookup = parseLookupReply(text);
      return { nodeUuid: lookup.node.uuid, lookup };
    } catch (err) {
      if (!(err instanceof InvalidLookupReply)) throw err;
      if (err.lasting) return { unusable: err.message };
    }
  }
  if (body?.uuid === undefined) return {};
  const bad = nodeIdentProblem(body.uuid);
  return bad === undefined ? { nodeUuid: body.uuid as string } : { unusable: `the reply's uuid ${bad}` };
}

/** `conductorVersion`: the API minor version when known (an ipa-api-url was given), else undefined (no header). */
export async function postInspection(
  payload: unknown,
  opts: { timeoutS: number; conductorVersion?: number },
  deps: CallbackDeps,
): Promise<CallbackOutcome> {
  const deadline = deps.clock.now() + opts.timeoutS * 1000;
  const version =
    opts.conductorVersion !== undefined && opts.conductorVersion >= V_INSPECTION_TOKEN
      ? `1.${V_INSPECTION_TOKEN}`
      : undefined;
  let last = '';
  for (let n = 1; ; n++) {
    try {
      const reply = await deps.api.send('POST', '', {
        body: payload,
        version,
        signal: deps.signal,
        // No attempt outlasts ipa-inspection-timeout.
        withinMs: deadline - deps.clock.now(),
      });
      if (reply.status < 300) {
        const { unusable, ...named } = parseAccepted(reply.text);
        if (unusable)
          deps.log.error({ reason: unusable }, 'inspection callback reply names no usable node; lookup by MAC');
        return { kind: 'accepted', status: reply.status, attempts: n, ...named };
      }
      last = `HTTP ${reply.status}: ${ironicFault(reply.text)}`;
      if (reply.status !== 409 && reply.status < 500)
        return { kind: 'refused', status: reply.status, reason: last, attempts: n };
    } catch (err) {
      if (deps.signal?.aborted || !(err instanceof ConductorUnreachable)) throw err;
      last = err.message;
    }
    const wait = waitS(n);
    if (deadline - deps.clock.now() <= wait * 1000) return { kind: 'failed', reason: last, attempts: n };
    deps.log.warn({ attempt: n, reason: last, retryInS: wait }, 'inspection callback failed, will retry');
    await deps.clock.sleep(wait * 1000, deps.signal);
  }
}
