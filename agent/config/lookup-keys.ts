// The keys of the lookup reply's `config` (Ironic's `get_node_with_token`), by what the agent does with them.
// Those it acts on are read in conductor/lookup-reply.ts; the rest are named here with why, and the link warns
// about each one whose value would have changed what IPA does (Ironic sends most of them on every lookup, with
// defaults that change nothing), and about any key it does not know. docs/ipa-compat.md has the table.
import { isObject } from '../parse.ts';

/** Read by conductor/lookup-reply.ts and applied (conductor/link.ts). */
export const LOOKUP_KEYS_ACTED_ON = [
  'heartbeat_timeout',
  'agent_token',
  'agent_md5_checksum_enable',
  'disable_deep_image_inspection',
  'permitted_image_formats',
  'tls_min_version',
  'tls_cipher_suites',
  'enable_bios_bootloader_install',
] as const;

interface Ignored {
  why: string;
  /** Whether this value would make IPA behave otherwise than the agent does. */
  matters: (v: unknown) => boolean;
}

export const LOOKUP_KEYS_NOT_ACTED_ON: Readonly<Record<string, Ignored>> = {
  agent_token_required: { why: 'IPA ignores it too: a token once issued is always required', matters: () => false },
  metrics: {
    why: 'the agent emits no metrics',
    matters: (v) => isObject(v) && v.backend !== undefined && v.backend !== null && v.backend !== 'noop',
  },
  metrics_statsd: { why: 'the agent emits no metrics (see metrics)', matters: () => false },
  agent_containers: {
    why: 'container steps are not implemented',
    matters: (v) =>
      isObject(v) &&
      (v.allow_arbitrary_containers === true ||
        (Array.isArray(v.allowed_containers) && v.allowed_containers.length > 0)),
  },
  agent_skip_bmc_detect: {
    why: 'the BMC is asked with ipmitool wherever the kernel exposes an IPMI device',
    matters: (v) => v === true,
  },
};

/** `config.<key> (why)` for every key of `raw` the agent does not act on and whose value matters. */
export function lookupKeysNotActedOn(raw: Readonly<Record<string, unknown>>): string[] {
  const out: string[] = [];
  for (const [key, value] of Object.entries(raw)) {
    if ((LOOKUP_KEYS_ACTED_ON as readonly string[]).includes(key)) continue;
    const known = LOOKUP_KEYS_NOT_ACTED_ON[key];
    if (!known) out.push(`config.${key} (not a lookup key this agent knows)`);
    else if (known.matters(value)) out.push(`config.${key}=${JSON.stringify(value)} (${known.why})`);
  }
  return out;
}
