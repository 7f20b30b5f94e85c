// The 200 body of `GET /v1/lookup`, parsed once into what the agent uses. Ironic's lookup `node` may
// be redacted (driver_internal_info replaced by a notice), so nothing here depends on its contents.
import type { NodeInfo } from '../state.ts';
import type { TlsVersion } from '../config/config.ts';
import { nonEmptyString, objectOr as record, parseBoolean } from '../parse.ts';

export interface LookupConfig {
  heartbeatTimeoutS: number;
  /** A fresh token, `"******"` (already issued), or null (conductor below 1.62). */
  agentToken: string | null;
  tlsMinVersion?: TlsVersion;
  tlsCipherSuites?: string;
  md5Enabled?: boolean;
  disableDeepImageInspection?: boolean;
  permittedImageFormats?: string[];
  /** Everything the conductor sent, for whoever needs a key not typed here. */
  raw: Record<string, unknown>;
}

export interface LookupReply {
  node: NodeInfo;
  config: LookupConfig;
}

export class InvalidLookupReply extends Error {}

export function parseLookupReply(text: string): LookupReply {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch {
    throw new InvalidLookupReply('lookup reply is not JSON');
  }
  const body = record(doc);
  const node = record(body?.node);
  if (!body || !node || typeof node.uuid !== 'string' || node.uuid === '') {
    throw new InvalidLookupReply('lookup reply has no node.uuid');
  }
  // A very old API put heartbeat_timeout at the top level and sent no config.
  const raw =
    record(body.config) ??
    (body.heartbeat_timeout !== undefined ? { heartbeat_timeout: body.heartbeat_timeout } : undefined);
  const timeout = Number(raw?.heartbeat_timeout);
  if (!raw || !Number.isFinite(timeout) || timeout <= 0) {
    throw new InvalidLookupReply('lookup reply has no config.heartbeat_timeout');
  }
  const tls = raw.tls_min_version;
  const formats = raw.permitted_image_formats;
  return {
    node: {
      ...node,
      uuid: node.uuid,
      properties: record(node.properties) ?? {},
      instance_info: record(node.instance_info) ?? {},
      driver_internal_info: record(node.driver_internal_info) ?? {},
    },
    config: {
      heartbeatTimeoutS: timeout,
      agentToken: typeof raw.agent_token === 'string' ? raw.agent_token : null,
      tlsMinVersion: tls === '1.2' || tls === '1.3' ? tls : undefined,
      tlsCipherSuites: nonEmptyString(raw.tls_cipher_suites),
      // A value that is no boolean is ignored, and the agent's own setting stands.
      md5Enabled: parseBoolean(raw.agent_md5_checksum_enable),
      disableDeepImageInspection: parseBoolean(raw.disable_deep_image_inspection),
      permittedImageFormats:
        Array.isArray(formats) && formats.every((f) => typeof f === 'string') ? (formats as string[]) : undefined,
      raw,
    },
  };
}

export const MASKED_TOKEN = '******';

/**
 * IPA's token acceptance: a token of 32+ characters is adopted; `"******"` (already issued) keeps the
 * token held (pre-generated via ipa-agent-token), and without one the lookup must be retried
 * (`undefined`); anything else keeps the held token.
 */
export function acceptToken(offered: string | null, held: string | null): string | null | undefined {
  if (offered === MASKED_TOKEN) return held ?? undefined;
  if (offered !== null && offered.length >= 32) return offered;
  return held;
}
