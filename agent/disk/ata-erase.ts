// ATA security erase through hdparm, in IPA's order: read the security state from `hdparm -I`, refuse a
// frozen drive, unlock one left locked with our password, set the password `NULL`, erase (enhanced when the
// drive offers it), confirm security is off again. Beyond IPA, whatever happens after the password may have
// been set (success, a failed or timed-out erase, a crash of the tool), the password is unlocked and
// disabled before returning, so a drive is never left locked with our password.
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';

/** The password IPA uses (hdparm ≥ 9.51 reads the literal `NULL` as an empty password). */
const PASSWORD = 'NULL';

export interface AtaSecurity {
  supported: boolean;
  enabled: boolean;
  locked: boolean;
  frozen: boolean;
  enhanced: boolean;
  /** The drive's own estimates, in minutes (null when it gives none, or only a "more than"). */
  eraseMinutes: number | null;
  enhancedEraseMinutes: number | null;
}

/** The lines of the `Security:` section, trimmed, tabs as spaces: `supported`, `not frozen`, … */
export function securityLines(identify: string): string[] | null {
  const lines = identify.split('\n');
  const at = lines.findIndex((l) => l.trimEnd() === 'Security:');
  if (at < 0) return null;
  const out: string[] = [];
  for (const l of lines.slice(at + 1)) {
    if (!l.startsWith('\t')) break;
    out.push(l.trim().replace(/\t+/g, ' '));
  }
  return out;
}

export function parseSecurity(identify: string): AtaSecurity | null {
  const lines = securityLines(identify);
  if (!lines) return null;
  // Exact lines, as IPA matches them: "not enabled" must not read as "enabled".
  const has = (l: string) => lines.includes(l);
  const times = lines.find((l) => /SECURITY ERASE UNIT/.test(l)) ?? '';
  // "more than 508min" is a saturated field, not an estimate: the erase may take any time.
  const minutes = (re: RegExp) => {
    const m = re.exec(times);
    return m && !m[1] ? Number(m[2]) : null;
  };
  return {
    supported: has('supported'),
    enabled: has('enabled'),
    locked: has('locked'),
    frozen: has('frozen'),
    enhanced: has('supported: enhanced erase'),
    eraseMinutes: minutes(/(more than )?(\d+)min for SECURITY ERASE UNIT/),
    enhancedEraseMinutes: minutes(/(more than )?(\d+)min for ENHANCED SECURITY ERASE UNIT/),
  };
}

export type AtaOutcome = { erased: true; enhanced: boolean } | { erased: false; reason: string };

export interface AtaOptions {
  log?: Logger;
  /**
   * How long the erase may take (0: no limit); by default twice the drive's estimate plus 10 minutes, and no
   * limit without one, as in IPA: killing hdparm does not stop the drive, which goes on erasing, locked.
   */
  eraseTimeoutMs?: number;
  /** Runs once every check has passed, just before the erase is set up (the read-back's canaries). */
  beforeErase?: () => Promise<void>;
}

async function security(disk: string, log?: Logger): Promise<AtaSecurity | null> {
  return parseSecurity((await run('hdparm', ['-I', disk], { log })).stdout);
}

const hdparm = (args: string[], disk: string, log?: Logger, timeoutMs?: number) =>
  run('hdparm', ['--user-master', 'u', ...args, disk], { log, timeoutMs });

/** Unlocks with our password (and hdparm < 9.51's empty one), as IPA does; the state read afterwards. */
async function unlock(disk: string, log?: Logger): Promise<AtaSecurity | null> {
  let state: AtaSecurity | null = null;
  for (const pw of [PASSWORD, '']) {
    try {
      await hdparm(['--security-unlock', pw], disk, log);
    } catch (err) {
      log?.warn({ disk, err: errorText(err) }, 'ATA security unlock failed');
    }
    state = await security(disk, log).catch(() => null);
    if (state && !state.locked) break;
  }
  return state;
}

/**
 * Leaves the drive without our password: unlock if locked, then disable. Returns why it could not,
 * or null once `hdparm -I` shows security not enabled.
 */
async function release(disk: string, log?: Logger): Promise<string | null> {
  let state = await security(disk, log).catch(() => null);
  if (state && !state.enabled) return null;
  if (!state || state.locked) state = await unlock(disk, log);
  try {
    await hdparm(['--security-disable', PASSWORD], disk, log);
  } catch (err) {
    log?.warn({ disk, err: errorText(err) }, 'ATA security disable failed');
  }
  state = await security(disk, log).catch(() => null);
  if (state && !state.enabled) {
    log?.info({ disk }, 'ATA security password removed');
    return null;
  }
  const why = state
    ? `security is still ${state.locked ? 'enabled and locked' : 'enabled'}`
    : 'its security state could not be read';
  log?.error({ disk }, `ATA security password could not be removed: ${why}`);
  return `the security password NULL could not be removed (${why})`;
}

export async function ataSecureErase(disk: string, opts: AtaOptions = {}): Promise<AtaOutcome> {
  const log = opts.log;
  // `hdparm -I` failing is no verdict on the drive: the error goes up, as in IPA.
  let state = await security(disk, log);
  if (!state) return { erased: false, reason: 'hdparm -I shows no ATA security feature set' };
  if (!state.supported) return { erased: false, reason: 'the drive does not support the ATA security feature set' };
  if (state.frozen) {
    throw new BlockDeviceEraseError(
      `Block device ${disk} is frozen and cannot be erased: its firmware froze the ATA security state at power-on ` +
        '(a suspend and resume, or re-plugging the drive, usually unfreezes it)',
    );
  }
  if (state.locked) {
    state = await unlock(disk, log);
    if (!state || state.locked)
      throw new BlockDeviceEraseError(`Block device ${disk} already has a security password set`);
  }
  const enhanced = state.enhanced;
  const minutes = enhanced ? state.enhancedEraseMinutes : state.eraseMinutes;
  const bound = minutes !== null ? (2 * minutes + 10) * 60_000 : 0;
  // A timer holds at most 2^31 - 1 ms (about 24.8 days); a longer estimate bounds nothing we can enforce.
  const timeoutMs = opts.eraseTimeoutMs ?? (bound < 2 ** 31 ? bound : 0);
  let failure: unknown = null;
  try {
    // Inside: a drive unlocked above still has our password, which must go even when this refuses.
    await opts.beforeErase?.();
    if (!state.enabled) {
      try {
        await hdparm(['--security-set-pass', PASSWORD], disk, log);
      } catch (err) {
        throw new BlockDeviceEraseError(`Security password set failed for device ${disk}: ${errorText(err)}`);
      }
    }
    log?.info({ disk, enhanced, timeout_s: timeoutMs ? timeoutMs / 1000 : null }, 'ATA security erase started');
    try {
      await hdparm([enhanced ? '--security-erase-enhanced' : '--security-erase', PASSWORD], disk, log, timeoutMs);
    } catch (err) {
      throw new BlockDeviceEraseError(`Erase failed for device ${disk}: ${errorText(err)}`);
    }
    const after = await security(disk, log);
    if (!after || after.enabled)
      throw new BlockDeviceEraseError(
        `An unknown error occurred erasing block device ${disk}: security is still enabled after the erase`,
      );
  } catch (err) {
    failure = err;
  }
  const leftover = await release(disk, log);
  if (failure) {
    if (!leftover) throw failure;
    throw new BlockDeviceEraseError(`${errorText(failure)}; and ${leftover}`);
  }
  if (leftover) throw new BlockDeviceEraseError(`Erased device ${disk}, but ${leftover}`);
  return { erased: true, enhanced };
}
