// The steps that change the host's firmware storage: pstore records and UEFI boot entries.
import { CleaningError } from '../errors.ts';
import { erasePstore } from '../host/pstore.ts';
import { cleanUefiNvram, parseMatchPatterns } from '../host/uefi-nvram.ts';
import type { TaskContext } from '../services.ts';
import type { ArgsInfo } from './step.ts';

/** The root the firmware steps work under: the host's only in the ramdisk, else a test's fake (config.ts). */
function firmwareRoot(ctx: TaskContext, stepName: string): string {
  const root = ctx.config.firmwareRoot;
  if (!root) {
    throw new CleaningError(
      `${stepName} changes the host's firmware storage: it runs only in the ramdisk (--host-actions=real) or under --ina-firmware-root`,
    );
  }
  return root;
}

export const MATCH_PATTERNS_ARGSINFO: ArgsInfo = {
  match_patterns: {
    description:
      'A list of regular expressions matched (case-insensitive) against the device path of each UEFI boot entry; matching entries are removed',
    required: false,
  },
};

export async function cleanUefiNvramStep(args: Readonly<Record<string, unknown>>, ctx: TaskContext): Promise<null> {
  const patterns = parseMatchPatterns(args.match_patterns);
  await cleanUefiNvram(firmwareRoot(ctx, 'clean_uefi_nvram'), patterns, ctx.log);
  return null;
}

export async function erasePstoreStep(ctx: TaskContext): Promise<null> {
  await erasePstore(firmwareRoot(ctx, 'erase_pstore'), ctx.log);
  return null;
}
