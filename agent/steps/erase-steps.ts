// The erase steps: every managed disk's metadata, a full erase, or IPA's express erase. The disks are those
// `cleaningTargets` picks (the guard's allow-list, the node's skip list); the methods are disk/erase-disk.ts's.
import type { BlockDevice } from '../disk/block-devices.ts';
import { cleaningTargets } from '../disk/clean-targets.ts';
import { eraseDisk, type LastResort } from '../disk/erase-disk.ts';
import { EraseBoard } from '../disk/erase-progress.ts';
import { eraseSettings, type EraseSettings } from '../disk/erase-settings.ts';
import { eraseMetadata } from '../disk/erase.ts';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import type { TaskContext } from '../services.ts';

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
  ctx: TaskContext,
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

/**
 * As IPA: a tool failing on one disk does not stop the others; the step then fails naming each such disk.
 * Anything else (the guard refusing a disk) stops at once.
 */
export async function eraseDevicesMetadata(ctx: TaskContext): Promise<null> {
  const { targets } = await cleaningTargets(ctx, 'skip', 'refuse');
  const failures: string[] = [];
  for (const d of targets) {
    try {
      await eraseMetadata(ctx, d.path, d.size);
    } catch (err) {
      if (!(err instanceof BlockDeviceEraseError)) throw err;
      failures.push(`"${d.path}": ${errorText(err)}`);
      ctx.log.error({ disk: d.path, err: errorText(err) }, `the metadata of ${d.path} could not be erased`);
    }
  }
  if (failures.length > 0) {
    throw new BlockDeviceEraseError(`Failed to erase the metadata on the device(s): ${failures.join('; ')}`);
  }
  ctx.log.info({ disks: targets.map((d) => d.path) }, 'disk metadata erased');
  return null;
}

export const eraseDevices = (ctx: TaskContext, args: Record<string, unknown>) =>
  eraseAll(ctx, eraseSettings(ctx, args), 'overwrite');

/**
 * IPA's fast path: NVMe format where enabled, else (here) a verified discard, else the metadata erase.
 * No ATA security erase and no overwrite; a failed format falls back whatever the continue setting says.
 */
export const eraseDevicesExpress = (ctx: TaskContext, args: Record<string, unknown>) =>
  eraseAll(
    ctx,
    { ...eraseSettings(ctx, args), ataSecureErase: false, continueIfSecureEraseFailed: true, discard: true },
    'metadata',
  );
