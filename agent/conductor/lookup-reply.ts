// The 200 body of `GET /v1/lookup`, parsed once into what the agent uses. Ironic's lookup `node` may
// be redacted (driver_internal_info replaced by a notice), so nothing here depends on its contents.
import type { NodeInfo } from '../state.ts';
import type { TlsVersion } from '../config/config.ts';
import { JsonRefused, parseBoundedJson } from '../bounded-json.ts';
import { nonEmptyString, objectOr as record, parseBoolean } from '../parse.ts';
import { nodeIdentProblem } from './node-ident.ts';

/**
 * The shortest heartbeat_timeout the agent follows. IPA takes any value, and 0.001 makes ten heartbeats a
 * second; below this the agent heartbeats as if the conductor had said this (every 1.5–3 s) and warns.
 */
export const MIN_HEARTBEAT_TIMEOUT_S = 5;

export interface LookupConfig {
  /** At least MIN_HEARTBEAT_TIMEOUT_S. */
  heartbeatTimeoutS: number;
  /** The conductor's heartbeat_timeout when it was below MIN_HEARTBEAT_TIMEOUT_S and raised to it. */
  heartbeatTimeoutRaisedFrom?: number;
  /** A fresh token, `"******"` (already issued), or null (conductor below 1.62). */
  agentToken: string | null;
  tlsMinVersion?: TlsVersion;
  tlsCipherSuites?: string;
  md5Enabled?: boolean;
  disableDeepImageInspection?: boolean;
  permittedImageFormats?: string[];
  enableBiosBootloaderInstall?: boolean;
  /** Everything the conductor sent, for whoever needs a key not typed here. */
  raw: Record<string, unknown>;
}

export interface LookupReply {
  node: NodeInfo;
  config: LookupConfig;
}

export class InvalidLookupReply extends Error {
  /**
   * Whether asking again cannot help: the reply was whole and well-formed, but what it says cannot be used
   * (a node identifier that is no UUID or name, a heartbeat_timeout that is no positive number of seconds).
   */
  constructor(
    message: string,
    readonly lasting = false,
  ) {
    super(message);
  }
}

/** heartbeat_timeout in seconds: a JSON number, or a decimal number as text (what a Python config may send). */
function heartbeatTimeout(v: unknown): number {
  const problem = (why: string) =>
    new InvalidLookupReply(`lookup reply's config.heartbeat_timeout ${JSON.stringify(v).slice(0, 40)} ${why}`, true);
  if (v === undefined) throw new InvalidLookupReply('lookup reply has no config.heartbeat_timeout');
  const decimal = typeof v === 'string' && /^\s*[+-]?(\d+\.?\d*|\.\d+)\s*$/.test(v);
  const n = typeof v === 'number' ? v : decimal ? Number(v) : Number.NaN;
  if (!Number.isFinite(n)) throw problem('is not a number of seconds');
  if (n <= 0) throw problem('is not a positive number of seconds');
  return n;
}

export function parseLookupReply(text: string): LookupReply {
  let doc: unknown;
  try {
    doc = parseBoundedJson(text);
  } catch (err) {
    if (err instanceof JsonRefused) throw new InvalidLookupReply(`lookup reply is not usable JSON: ${err.message}`);
    throw err;
  }
  const body = record(doc);
  const node = record(body?.node);
  if (!body || !node || node.uuid === undefined) throw new InvalidLookupReply('lookup reply has no node.uuid');
  const bad = nodeIdentProblem(node.uuid);
  if (bad !== undefined) throw new InvalidLookupReply(`lookup reply's node.uuid ${bad}`, true);
  const uuid = node.uuid as string;
  // A very old API put heartbeat_timeout at the top level and sent no config.
  const raw = record(body.config) ?? { heartbeat_timeout: body.heartbeat_timeout };
  const given = heartbeatTimeout(raw.heartbeat_timeout);
  const timeout = Math.max(given, MIN_HEARTBEAT_TIMEOUT_S);
  const tls = raw.tls_min_version;
  const formats = raw.permitted_image_formats;
  return {
    node: {
      ...node,
      uuid,
      properties: record(node.properties) ?? {},
      instance_info: record(node.instance_info) ?? {},
      driver_internal_info: record(node.driver_internal_info) ?? {},
    },
    config: {
      heartbeatTimeoutS: timeout,
      ...(given < timeout ? { heartbeatTimeoutRaisedFrom: given } : {}),
      agentToken: typeof raw.agent_token === 'string' ? raw.agent_token : null,
      tlsMinVersion: tls === '1.2' || tls === '1.3' ? tls : undefined,
      tlsCipherSuites: nonEmptyString(raw.tls_cipher_suites),
      // A value that is no boolean is ignored, and the agent's own setting stands.
      md5Enabled: parseBoolean(raw.agent_md5_checksum_enable),
      disableDeepImageInspection: parseBoolean(raw.disable_deep_image_inspection),
      enableBiosBootloaderInstall: parseBoolean(raw.enable_bios_bootloader_install),
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
