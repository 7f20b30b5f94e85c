// The full erase of one disk, in IPA's order with honest checks. NVMe namespaces get Format NVM (crypto
// erase where the controller offers it), other disks an ATA security erase where the drive supports one;
// when that is off, unsupported, or failed and the node allows falling back, a discard (counted only if
// the read-back finds zeros), else overwrite passes (IPA's shred: N random passes, then zeros). After every
// method the sampled read-back of erase-verify.ts decides whether it counts, against canaries planted just before.
import { randomInt } from 'node:crypto';
import type { AgentServices } from '../services.ts';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { ProgressMeter } from '../progress.ts';
import { ataSecureErase } from './ata-erase.ts';
import type { BlockDevice } from './block-devices.ts';
import type { EraseSettings } from './erase-settings.ts';
import { judge, plantCanaries, readSamples, samplePlan, type Expectation, type Verification } from './erase-verify.ts';
import { nvmeController, nvmeSecureErase } from './nvme-erase.ts';
import { overwriteDevice } from './overwrite.ts';
import { eraseMetadata } from './erase.ts';

export type EraseMethod =
  | 'nvme crypto erase'
  | 'nvme user-data erase'
  | 'ata enhanced security erase'
  | 'ata security erase'
  | 'secure discard'
  | 'discard'
  | 'overwrite'
  | 'metadata';

/** One disk's line in the step's result. */
export interface DiskErased {
  method: EraseMethod;
  bytes: number;
  /** Overwrite only: random passes plus the zero pass. */
  passes?: number;
  seconds: number;
  /** Null for a metadata erase, which leaves data in place by design (erase_devices_express). */
  verification: Verification | null;
  /** Methods tried before the one that counted, and why each did not. */
  attempts: { method: string; error: string }[];
}

/** `signal`: the command's cancellation (see `eraseDisk`). */
type Services = Pick<AgentServices, 'guard' | 'log'> & { signal?: AbortSignal };

/** What runs when no secure erase or discard counted: IPA's shred, or (express) the metadata erase. */
export type LastResort = 'overwrite' | 'metadata';

/** A secure erase that did not hold up; the node's continue setting decides what happens next. */
export class SecureEraseFailed extends Error {}

/**
 * A cancelled erase (`services.signal`) stops its discard or overwrite at once and starts no further method,
 * throwing the signal's reason. A secure erase or format already running is let finish, as in IPA: killing
 * hdparm leaves the drive erasing and locked.
 */
export async function eraseDisk(
  services: Services,
  dev: BlockDevice,
  settings: EraseSettings,
  meter: ProgressMeter,
  erasing: ReadonlySet<string>,
  lastResort: LastResort = 'overwrite',
): Promise<DiskErased> {
  const log = services.log.child({ disk: dev.path });
  const disk = dev.path;
  const signal = services.signal;
  // A method can take hours: a disk mounted or claimed meanwhile, or a cancel, must stop the erase before the next.
  const guard = async (purpose: string) => {
    signal?.throwIfAborted();
    await services.guard.assertWritable(disk, purpose);
  };
  await guard('erase');
  const started = Date.now();
  const seed = randomInt(2 ** 31);
  const plan = samplePlan(dev.size, seed);
  log.info({ seed, regions: plan.regions.length }, `read-back samples of ${disk} drawn with seed ${seed}`);
  const attempts: DiskErased['attempts'] = [];

  let canaries: Buffer[] | null = null;
  // Asked again here, not only before the method's checks: identifying a drive takes seconds, and the canaries
  // are the step's first write.
  const plant = async (purpose: string): Promise<void> => {
    await guard(purpose);
    meter.start('canaries', null, { device: disk });
    canaries = await plantCanaries(disk, plan);
  };
  const verify = async (method: string, expect: Expectation): Promise<Verification> => {
    if (!canaries) throw new Error(`internal: ${method} of ${disk} ran before the read-back's canaries`);
    meter.start('verifying', null, { device: disk, method });
    const v = judge(plan, canaries, await readSamples(disk, plan, log), expect);
    log.info(
      { method, ...v },
      v.ok ? `${method} verified on ${disk}` : `${method} did not erase ${disk}: ${v.failure}`,
    );
    return v;
  };
  const metadata = async (): Promise<void> => {
    signal?.throwIfAborted();
    meter.start('metadata', null, { device: disk });
    await eraseMetadata(services, disk, dev.size);
  };
  const done = (method: EraseMethod, verification: Verification | null, passes?: number): DiskErased => ({
    method,
    bytes: dev.size,
    ...(passes !== undefined ? { passes } : {}),
    seconds: Number(((Date.now() - started) / 1000).toFixed(3)),
    verification,
    attempts,
  });

  const secure = async (): Promise<DiskErased | null> => {
    const nvme = nvmeController(dev.name) !== null;
    if (nvme && settings.nvmeSecureErase) {
      await guard('run an NVMe format on');
      meter.start('nvme format', null, { device: disk });
      const method = await nvmeSecureErase(disk, dev.name, {
        log,
        erasing,
        beforeFormat: () => plant('run an NVMe format on'),
      });
      const v = await verify(method, 'changed');
      if (!v.ok) throw new BlockDeviceEraseError(`${method} of ${disk} left data behind: ${v.failure} (seed ${seed})`);
      return done(method, v);
    }
    if (!nvme && settings.ataSecureErase) {
      await guard('run an ATA security erase on');
      meter.start('ata security erase', null, { device: disk });
      const outcome = await ataSecureErase(disk, { log, beforeErase: () => plant('run an ATA security erase on') });
      if (!outcome.erased) {
        log.info({ reason: outcome.reason }, `no ATA security erase for ${disk}: ${outcome.reason}`);
        attempts.push({ method: 'ata security erase', error: outcome.reason });
        return null;
      }
      const method = outcome.enhanced ? 'ata enhanced security erase' : 'ata security erase';
      const v = await verify(method, 'changed');
      if (!v.ok) throw new BlockDeviceEraseError(`${method} of ${disk} left data behind: ${v.failure} (seed ${seed})`);
      return done(method, v);
    }
    return null;
  };

  try {
    const result = await secure();
    if (result) return result;
  } catch (err) {
    // Only the drive's refusals fall back; a missing or failing tool fails the step, as in IPA, and so does the guard.
    if (!(err instanceof BlockDeviceEraseError)) throw err;
    if (!settings.continueIfSecureEraseFailed) {
      throw new SecureEraseFailed(
        `secure erase failed and falling back to overwriting is not enabled (agent_continue_if_secure_erase_failed): ${errorText(err)}`,
      );
    }
    log.warn({ err: errorText(err) }, 'secure erase failed; falling back as the node allows');
    attempts.push({ method: 'secure erase', error: errorText(err) });
  }

  if (settings.discard) {
    for (const [method, args] of [
      ['secure discard', ['-s', disk]],
      ['discard', [disk]],
    ] as const) {
      await plant(`run a ${method} on`);
      meter.start(method, null, { device: disk });
      try {
        await run('blkdiscard', args, { log, timeoutMs: 0, signal });
      } catch (err) {
        signal?.throwIfAborted();
        attempts.push({ method, error: errorText(err) });
        continue;
      }
      const v = await verify(method, 'zeros');
      if (v.ok) {
        // A discard the drive honours only in part can pass the sampled read-back and still leave partition
        // signatures, which express, as IPA's, must remove.
        if (lastResort === 'metadata') await metadata();
        return done(method, v);
      }
      // The device acknowledged the discard but still returns data: not an erase.
      attempts.push({ method, error: `read-back found ${v.failure} (seed ${seed})` });
      break;
    }
  }

  if (lastResort === 'metadata') {
    await metadata();
    return done('metadata', null);
  }

  // Nothing asked for at all still leaves the disk zeroed: an erase step must erase.
  const zero = settings.finalZeroPass || settings.randomPasses === 0;
  const passes = settings.randomPasses + (zero ? 1 : 0);
  let pass = 0;
  await plant('overwrite');
  try {
    await overwriteDevice(
      disk,
      dev.size,
      settings.randomPasses,
      zero,
      (p) => {
        if (p.pass !== pass) {
          pass = p.pass;
          meter.start('overwrite', p.total, {
            device: disk,
            pass,
            passes,
            data: pass <= settings.randomPasses ? 'random' : 'zeros',
          });
        }
        meter.set(p.bytes);
      },
      signal,
    );
  } catch (err) {
    signal?.throwIfAborted();
    throw new BlockDeviceEraseError(`Unable to erase block device ${disk}: ${errorText(err)}`);
  }
  const v = await verify('overwrite', zero ? 'zeros' : 'changed');
  if (!v.ok) throw new BlockDeviceEraseError(`overwriting ${disk} left data behind: ${v.failure} (seed ${seed})`);
  return done('overwrite', v, passes);
}
