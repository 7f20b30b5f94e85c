// Ironic API microversions the agent cares about, and discovery of what the conductor supports.
// Versions are all 1.x, so they are handled as the minor number.
import { parseBoundedJson } from '../bounded-json.ts';
import type { Logger } from '../log.ts';
import type { IronicApi } from './ironic-api.ts';

/** IPA's assumption when discovery fails (no token then: a modern conductor will refuse heartbeats). */
export const V_FALLBACK = 31;
/** `agent_version` in the heartbeat. */
export const V_AGENT_VERSION = 36;
/** Lookup issues the agent token; IPA caps the lookup header here. */
export const V_TOKEN = 62;
/** `agent_verify_ca` and auto-TLS; IPA caps the heartbeat header here. */
export const V_VERIFY_CA = 68;
/** 2025.1 (Ironic 29.0): the conductor sends the agent token on GET /v1/commands too. */
export const V_TOKEN_ON_GET = 96;

export function parseVersion(text: unknown): number | undefined {
  if (typeof text !== 'string') return undefined;
  const m = /^1\.(\d+)$/.exec(text.trim());
  return m ? Number(m[1]) : undefined;
}

export function versionHeader(minor: number, cap: number): string {
  return `1.${Math.min(minor, cap)}`;
}

/**
 * The conductor's version: `ipa-ironic-api-version` if given, else `default_version.version` from
 * `GET /`, cached once known. A failed discovery answers 1.31 for this call only, as IPA does.
 */
export class VersionCache {
  private known?: number;

  constructor(
    private readonly api: IronicApi,
    configured: string | undefined,
    private readonly log: Logger,
  ) {
    this.known = parseVersion(configured);
  }

  async get(signal?: AbortSignal): Promise<number> {
    if (this.known !== undefined) return this.known;
    try {
      const reply = await this.api.send('GET', '/', { signal });
      const doc = parseBoundedJson(reply.text) as { default_version?: { version?: unknown } } | null;
      const minor = parseVersion(doc?.default_version?.version);
      if (reply.status === 200 && minor !== undefined) {
        this.known = minor;
        this.log.info({ version: `1.${minor}`, url: reply.base }, 'conductor API version');
        return minor;
      }
      this.log.warn({ status: reply.status }, 'conductor API root gave no default_version; assuming 1.31');
    } catch (err) {
      if (signal?.aborted) throw err;
      this.log.warn({ err: (err as Error).message }, 'conductor API version discovery failed; assuming 1.31');
    }
    return V_FALLBACK;
  }
}
