// Looking the node up: `GET /v1/lookup?addresses=…` until a usable answer or `ipa-lookup-timeout`.
// IPA's schedule: every failure (no answer, any status but 200, a bad body, an unusable token) is
// retried after U(interval, min(60, 2^(n-1))) s; a 409 (node locked while the token is created) also
// pauses 5, then 10, then 30 s on each later 409. A whole reply whose contents cannot be used (a node
// identifier that is no UUID or name, a heartbeat_timeout that is no positive number) ends the lookup at
// once with the reason: asking the same conductor again would only hide it until the timeout.
import type { Logger } from '../log.ts';
import type { Clock } from '../clock.ts';
import { LookupNodeError } from './errors.ts';
import { ironicFault, type IronicApi } from './ironic-api.ts';
import {
  InvalidLookupReply,
  MIN_HEARTBEAT_TIMEOUT_S,
  acceptToken,
  parseLookupReply,
  type LookupReply,
} from './lookup-reply.ts';
import { V_TOKEN, versionHeader } from './versions.ts';

const CONFLICT_PAUSES_S = [5, 10, 30];
const MAX_BACKOFF_S = 60;

export interface LookupRequest {
  macs: readonly string[];
  nodeUuid?: string;
  /**
   * The conductor's API version (minor), asked before each attempt: until its root answers, 1.31 is assumed for
   * that attempt only (IPA does the same), so a conductor that was not up yet is spoken to at its real version.
   */
  versions: { get(signal?: AbortSignal): Promise<number> };
  /** The token already held (pre-generated via ipa-agent-token), if any. */
  heldToken: string | null;
  timeoutS: number;
  intervalS: number;
}

export interface LookupDeps {
  api: IronicApi;
  clock: Clock;
  random: () => number;
  log: Logger;
  signal?: AbortSignal;
}

export interface LookupResult extends LookupReply {
  /** The token to use from now on (null only when the conductor issues none, below 1.62). */
  token: string | null;
  /** The API version the successful attempt spoke: the agent's from here on (TLS, heartbeats). */
  version: number;
}

type Attempt = { ok: LookupResult } | { retry: string; conflict?: boolean };

export function lookupPath(req: Pick<LookupRequest, 'macs' | 'nodeUuid'>): string {
  const q: string[] = [];
  // Ironic reads the commas literally (URLSearchParams would send %2C and %3A); MACs are the agent's own.
  if (req.macs.length > 0) q.push(`addresses=${req.macs.join(',')}`);
  // The node UUID came from outside (the inspection callback): encoded, whatever checked it before.
  if (req.nodeUuid) q.push(`node_uuid=${encodeURIComponent(req.nodeUuid)}`);
  return `/v1/lookup?${q.join('&')}`;
}

async function attempt(req: LookupRequest, deps: LookupDeps): Promise<Attempt> {
  const version = await req.versions.get(deps.signal);
  let reply: Awaited<ReturnType<typeof deps.api.send>>;
  try {
    reply = await deps.api.send('GET', lookupPath(req), {
      version: versionHeader(version, V_TOKEN),
      signal: deps.signal,
    });
  } catch (err) {
    if (deps.signal?.aborted) throw err;
    return { retry: (err as Error).message };
  }
  if (reply.status !== 200) {
    const why = `HTTP ${reply.status}: ${ironicFault(reply.text)}`;
    return reply.status === 409 ? { retry: why, conflict: true } : { retry: why };
  }
  let parsed: LookupReply;
  try {
    parsed = parseLookupReply(reply.text);
  } catch (err) {
    if (err instanceof InvalidLookupReply && err.lasting) throw new LookupNodeError(err.message);
    if (err instanceof InvalidLookupReply) return { retry: err.message };
    throw err;
  }
  const token = acceptToken(parsed.config.agentToken, req.heldToken);
  if (token === undefined) {
    return { retry: 'the conductor already handed out this node\'s token ("******") and this agent holds none' };
  }
  return { ok: { ...parsed, token, version } };
}

export async function lookupNode(req: LookupRequest, deps: LookupDeps): Promise<LookupResult> {
  const { clock, log } = deps;
  const deadline = clock.now() + req.timeoutS * 1000;
  let conflicts = 0;
  for (let n = 1; ; n++) {
    const result = await attempt(req, deps);
    if ('ok' in result) {
      log.info({ node: result.ok.node.uuid, attempts: n }, 'lookup succeeded');
      const given = result.ok.config.heartbeatTimeoutRaisedFrom;
      if (given !== undefined) {
        log.warn(
          { heartbeatTimeoutS: given, usedS: result.ok.config.heartbeatTimeoutS },
          `the conductor's heartbeat_timeout of ${given} s is below ${MIN_HEARTBEAT_TIMEOUT_S} s: heartbeating as if it were ${MIN_HEARTBEAT_TIMEOUT_S} s`,
        );
      }
      return result.ok;
    }
    log.warn({ attempt: n, reason: result.retry }, 'lookup failed, will retry');
    if (result.conflict) {
      await clock.sleep(CONFLICT_PAUSES_S[Math.min(conflicts++, CONFLICT_PAUSES_S.length - 1)]! * 1000, deps.signal);
    }
    const left = deadline - clock.now();
    if (left <= 0 || deps.signal?.aborted) {
      throw new LookupNodeError(
        `Could not look up node info after ${n} attempt(s) in ${req.timeoutS} s; last: ${oneLine(result.retry)}`,
      );
    }
    const high = Math.max(req.intervalS, Math.min(MAX_BACKOFF_S, 2 ** (n - 1)));
    const wait = (req.intervalS + deps.random() * (high - req.intervalS)) * 1000;
    await clock.sleep(Math.min(wait, left), deps.signal);
  }
}

function oneLine(text: string): string {
  return text.replace(/\s+/g, ' ').trim().slice(0, 300);
}
