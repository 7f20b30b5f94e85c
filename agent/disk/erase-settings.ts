// The erase settings of one cleaning run. Ironic sends them in node.driver_internal_info with every
// execute_clean_step (not as step args); a missing key takes IPA's default, and the agent's own
// ipa-erase-* options stand in where IPA has none to offer (shred's passes when Ironic sent nothing).
// A value that is there but unusable (iterations "abc" or 1e300, concurrency 0, zeroize "perhaps") refuses
// the step before any disk is touched: IPA would run with whatever it made of it, or forever. Ironic's options
// have minimums only: a large concurrency (a storage node with 90 disks) is clamped, not refused.
import type { Config } from '../config/config.ts';
import { InvalidCommandParamsError } from '../errors.ts';
import type { Logger } from '../log.ts';
import { BOOLEAN_WORDS, isObject, parseBoolean, parseWholeNumber } from '../parse.ts';
import type { AgentServices } from '../services.ts';

export interface EraseSettings {
  nvmeSecureErase: boolean;
  ataSecureErase: boolean;
  /** A failed NVMe/ATA secure erase falls back to discard/overwrite instead of failing the disk. */
  continueIfSecureEraseFailed: boolean;
  randomPasses: number;
  finalZeroPass: boolean;
  /** Disks erased at once. */
  concurrency: number;
  skipReadOnly: boolean;
  /** Try discard (verified) before overwriting. An agent option: IPA never discards. */
  discard: boolean;
}

/**
 * Random overwrite passes. One pass is what NIST SP 800-88 asks of an overwrite and ten of a large disk already
 * take days; only an absurd count (1e300, which would run for ever) is refused.
 */
export const MAX_ERASE_ITERATIONS = 100;
/** Disks erased at once: more is run at this many (the pool never runs more workers than disks anyway). */
export const MAX_ERASE_CONCURRENCY = 64;

type Info = Record<string, unknown>;

const refuse = (key: string, value: unknown, want: string) =>
  new InvalidCommandParamsError(
    `Invalid erase setting driver_internal_info.${key}=${JSON.stringify(value) ?? String(value)}: expected ${want}`,
  );

/** null counts as absent, as it does for the burn-in settings. */
function bool(info: Info, key: string): boolean | undefined {
  const v = info[key];
  if (v === undefined || v === null) return undefined;
  const b = parseBoolean(v);
  if (b === undefined) throw refuse(key, v, `true or false (${BOOLEAN_WORDS})`);
  return b;
}

function count(info: Info, key: string, min: number, max: number): number | undefined {
  const v = info[key];
  if (v === undefined || v === null) return undefined;
  const n = parseWholeNumber(v, min, max);
  if (n === undefined) throw refuse(key, v, `a whole number from ${min} to ${max}`);
  return n;
}

/** The settings from a node's driver_internal_info; throws InvalidCommandParamsError on an unusable value. */
export function eraseSettingsFrom(driverInternalInfo: unknown, cfg: Config['erase'], log: Logger): EraseSettings {
  const info = isObject(driverInternalInfo) ? driverInternalInfo : {};
  const asked = count(info, 'disk_erasure_concurrency', 1, Number.MAX_SAFE_INTEGER) ?? 1;
  if (asked > MAX_ERASE_CONCURRENCY) {
    log.warn(
      { asked, used: MAX_ERASE_CONCURRENCY },
      `disk_erasure_concurrency ${asked} is run as ${MAX_ERASE_CONCURRENCY}`,
    );
  }
  // Every key is read (not only the first that matters) so that any bad value refuses the step.
  const continueNew = bool(info, 'agent_continue_if_secure_erase_failed');
  const continueAta = bool(info, 'agent_continue_if_ata_erase_failed');
  return {
    nvmeSecureErase: bool(info, 'agent_enable_nvme_secure_erase') ?? true,
    ataSecureErase: bool(info, 'agent_enable_ata_secure_erase') ?? true,
    // The deprecated ATA-only key still counts when the newer one is absent, as in IPA.
    continueIfSecureEraseFailed: continueNew ?? continueAta ?? false,
    randomPasses: count(info, 'agent_erase_devices_iterations', 0, MAX_ERASE_ITERATIONS) ?? cfg.randomPasses,
    finalZeroPass: bool(info, 'agent_erase_devices_zeroize') ?? cfg.finalZeroPass,
    concurrency: Math.min(asked, MAX_ERASE_CONCURRENCY),
    skipReadOnly: bool(info, 'agent_erase_skip_read_only') ?? false,
    discard: cfg.discardFirst,
  };
}

/**
 * The settings of the node the agent holds (the one the step's params brought). The erase steps take no args
 * (IPA's fail on any with a TypeError): an arg such as `iterations` would otherwise be a knob silently ignored.
 */
export function eraseSettings(
  services: Pick<AgentServices, 'config' | 'state' | 'log'>,
  args: Record<string, unknown> = {},
): EraseSettings {
  const given = Object.keys(args);
  if (given.length > 0) {
    throw new InvalidCommandParamsError(
      `The erase steps take no args (their settings come from the node's driver_internal_info): got ${given.join(', ')}`,
    );
  }
  return eraseSettingsFrom(services.state.status.node?.driver_internal_info, services.config.erase, services.log);
}
