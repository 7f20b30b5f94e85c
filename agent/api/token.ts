// The agent-token rule for the command routes. The token travels only as the `agent_token` query
// parameter (first occurrence wins). POST always needs it once the agent holds one. GET needs it from
// the first request when the conductor sends it on GET (API 1.96 and later, as IPA master requires) or
// `requireOnGet` says so; for an older conductor (21.4 sends none on GET) GET stays open until a GET
// arrives carrying the right token. A standalone agent has no conductor to make allowance for: holding a
// token, it requires it on GET from the start, as IPA does. Without a token, only a standalone agent serves
// commands.
import type { MiddlewareHandler } from 'hono';
import type { AgentState } from '../state.ts';
import { FAULTS, fault } from './envelope.ts';

export interface TokenPolicy {
  standalone: boolean;
  requireOnGet: boolean;
}

export function tokenCheck(state: AgentState, policy: TokenPolicy): MiddlewareHandler {
  return async (c, next) => {
    const held = state.agentToken;
    const given = new URL(c.req.url).searchParams.get('agent_token');
    let ok: boolean;
    if (!held) {
      ok = policy.standalone;
    } else if (given) {
      ok = given === held;
      if (ok && c.req.method !== 'POST') state.getTokenSeen = true;
    } else {
      ok =
        c.req.method !== 'POST' &&
        !policy.standalone &&
        !policy.requireOnGet &&
        !state.conductorSendsGetToken &&
        !state.getTokenSeen;
    }
    if (!ok) return fault(c, 401, FAULTS.token);
    await next();
  };
}
