// clean: the in-band cleaning steps the conductor runs between deployments. The step list and the
// hardware-manager version come from disk/hardware-manager.ts; the steps erase every managed disk.
import { isObject, optObject, reqObject } from '../params.ts';
import { command, type CommandContext, type Extension } from '../types.ts';
import { BlockDeviceEraseError, CleaningError, errorText, InvalidCommandParamsError } from '../../errors.ts';
import type { BlockDevice } from '../../disk/block-devices.ts';
import { cleaningTargets } from '../../disk/clean-targets.ts';
import { eraseDisk, type LastResort } from '../../disk/erase-disk.ts';
import { EraseBoard } from '../../disk/erase-progress.ts';
import { eraseSettings, type EraseSettings } from '../../disk/erase-settings.ts';
import { eraseMetadata } from '../../disk/erase.ts';
import { checkVersions, offeredSteps, stepsResult, type StepDescription } from '../../disk/hardware-manager.ts';
import { burninSteps } from '../../burnin/steps.ts';
import { erasePstore } from '../../host/pstore.ts';
import { cleanUefiNvram, parseMatchPatterns } from '../../host/uefi-nvram.ts';
import { nodeFromParams, type NodeInfo } from '../../state.ts';

const step = (name: string, priority = 0, extra: Partial<StepDescription> = {}): StepDescription => ({
  step: name,
  priority,
  interface: 'deploy',
  reboot_requested: false,
  abortable: true,
  ...extra,
});

export const MATCH_PATTERNS_ARGSINFO: StepDescription['argsinfo'] = {
  match_patterns: {
    description:
      'A list of regular expressions matched (case-insensitive) against the device path of each UEFI boot entry; matching entries are removed',
    required: false,
  },
};

/**
 * IPA's priorities: metadata (99) runs before the full erase (10); the others run only when asked for (manual
 * cleaning, priority 0).
 */
export const CLEAN_STEPS: readonly StepDescription[] = [
  step('erase_devices', 10),
  step('erase_devices_metadata', 99),
  step('erase_devices_express'),
  step('erase_pstore'),
  step('clean_uefi_nvram', 0, { argsinfo: MATCH_PATTERNS_ARGSINFO }),
  step('burnin_cpu'),
  step('burnin_disk'),
  step('burnin_memory'),
  step('burnin_network'),
];

interface ExecuteParams {
  step: Record<string, unknown> & { step: string };
  node?: NodeInfo;
  cleanVersion: unknown;
}

/** Runs `work` over `items`, at most `limit` at a time, starting none once `signal` is aborted. */
async function pool<T>(
  items: readonly T[],
  limit: number,
  signal: AbortSignal,
  work: (item: T) => Promise<void>,
): Promise<void> {
  let next = 0;
  const worker = async () => {
    while (next < items.length && !signal.aborted) await work(items[next++]!);
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
}

/**
 * Erases every target, `disk_erasure_concurrency` at a time. A disk that fails does not stop the others
 * (no erase is left running behind a failed step); the step then fails naming every such disk and why.
 * The result has one entry per disk: how it was erased and verified, or why it was skipped. A cancel stops
 * every erase before its next method (see `eraseDisk`) and starts no further disk.
 */
async function eraseAll(
  ctx: CommandContext,
  settings: EraseSettings,
  lastResort: LastResort,
): Promise<Record<string, unknown>> {
  const readOnly = lastResort === 'metadata' ? 'skip' : 'refuse-unless-allowed';
  const { targets, skipped } = await cleaningTargets(ctx, readOnly, 'refuse');
  const board = new EraseBoard(
    (r) => ctx.progress(r),
    ctx.log,
    targets.map((d) => d.path),
  );
  const erasing = new Set(targets.map((d) => d.name));
  const results: Record<string, unknown> = {};
  const failures: string[] = [];
  ctx.log.info({ disks: targets.map((d) => d.path), concurrency: settings.concurrency, settings }, 'erasing disks');
  await pool(targets, settings.concurrency, ctx.signal, async (d: BlockDevice) => {
    const meter = board.meter(d.path);
    try {
      const r = await eraseDisk(ctx, d, settings, meter, erasing, lastResort);
      results[d.path] = r;
      ctx.log.info({ disk: d.path, ...r }, `${d.path} erased: ${r.method} in ${r.seconds} s`);
    } catch (err) {
      failures.push(`${d.path}: ${errorText(err)}`);
      results[d.path] = { error: errorText(err) };
      ctx.log.error({ disk: d.path, err: errorText(err) }, `${d.path} could not be erased`);
    } finally {
      meter.finish();
      board.set(d.path, { phase: failures.some((f) => f.startsWith(`${d.path}:`)) ? 'failed' : 'done' });
    }
  });
  // Cancelled: the disks cut short failed with the cancellation, not with an erase error of their own.
  ctx.signal.throwIfAborted();
  if (failures.length > 0) {
    throw new BlockDeviceEraseError(
      `Failed to erase ${failures.length} of ${targets.length} device(s): ${failures.join('; ')}`,
    );
  }
  for (const s of skipped) results[s.device] = { skipped: s.reason };
  return results;
}

/** The root the firmware steps work under: the host's only in the ramdisk, else a test's fake (config.ts). */
function firmwareRoot(ctx: CommandContext, stepName: string): string {
  const root = ctx.config.firmwareRoot;
  if (!root) {
    throw new CleaningError(
      `${stepName} changes the host's firmware storage: it runs only in the ramdisk (--host-actions=real) or under --ina-firmware-root`,
    );
  }
  return root;
}

export async function cleanUefiNvramStep(ctx: CommandContext, args: Record<string, unknown>): Promise<null> {
  const patterns = parseMatchPatterns(args.match_patterns);
  await cleanUefiNvram(firmwareRoot(ctx, 'clean_uefi_nvram'), patterns, ctx.log);
  return null;
}

type CleanRunner = (ctx: CommandContext, args: Record<string, unknown>) => Promise<unknown>;

const node = (ctx: CommandContext) => ctx.state.status.node;

export const runners: Record<string, CleanRunner> = {
  // As IPA: a tool failing on one disk does not stop the others; the step then fails naming each such disk.
  // Anything else (the guard refusing a disk) stops at once.
  async erase_devices_metadata(services) {
    const { targets } = await cleaningTargets(services, 'skip', 'refuse');
    const failures: string[] = [];
    for (const d of targets) {
      try {
        await eraseMetadata(services, d.path, d.size);
      } catch (err) {
        if (!(err instanceof BlockDeviceEraseError)) throw err;
        failures.push(`"${d.path}": ${errorText(err)}`);
        services.log.error({ disk: d.path, err: errorText(err) }, `the metadata of ${d.path} could not be erased`);
      }
    }
    if (failures.length > 0) {
      throw new BlockDeviceEraseError(`Failed to erase the metadata on the device(s): ${failures.join('; ')}`);
    }
    services.log.info({ disks: targets.map((d) => d.path) }, 'disk metadata erased');
    return null;
  },
  erase_devices: (ctx, args) => eraseAll(ctx, eraseSettings(ctx, args), 'overwrite'),
  // IPA's fast path: NVMe format where enabled, else (here) a verified discard, else the metadata erase.
  // No ATA security erase and no overwrite; a failed format falls back whatever the continue setting says.
  erase_devices_express: (ctx, args) =>
    eraseAll(
      ctx,
      { ...eraseSettings(ctx, args), ataSecureErase: false, continueIfSecureEraseFailed: true, discard: true },
      'metadata',
    ),
  async erase_pstore(ctx) {
    await erasePstore(firmwareRoot(ctx, 'erase_pstore'), ctx.log);
    return null;
  },
  clean_uefi_nvram: cleanUefiNvramStep,
  burnin_cpu: (ctx) => burninSteps.burnin_cpu(ctx, node(ctx)),
  burnin_disk: (ctx) => burninSteps.burnin_disk(ctx, node(ctx)),
  burnin_memory: (ctx) => burninSteps.burnin_memory(ctx, node(ctx)),
  burnin_network: (ctx) => burninSteps.burnin_network(ctx, node(ctx)),
};

export const clean: Extension = {
  get_clean_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: async () => stepsResult('clean', await offeredSteps(CLEAN_STEPS)),
  }),

  execute_clean_step: command<ExecuteParams>({
    mode: 'async',
    parse: (p) => {
      const step = reqObject(p, 'step');
      if (typeof step.step !== 'string' || step.step === '') {
        throw new InvalidCommandParamsError(`Malformed clean_step, no "step" key: ${JSON.stringify(step)}`);
      }
      const node = optObject(p, 'node');
      return {
        step: step as ExecuteParams['step'],
        node: nodeFromParams(node),
        cleanVersion: p.clean_version,
      };
    },
    run: async (p, ctx) => {
      checkVersions(p.cleanVersion);
      // The node in the params is the conductor's current view (lookup's may be sanitised): keep it.
      if (p.node) ctx.state.update({ node: p.node });
      const runner = Object.hasOwn(runners, p.step.step) ? runners[p.step.step] : undefined;
      if (!runner) throw new CleaningError(`Clean step ${p.step.step} is not supported by this agent`);
      const args = isObject(p.step.args) ? p.step.args : {};
      return { clean_result: await runner(ctx, args), clean_step: p.step };
    },
  }),
};
