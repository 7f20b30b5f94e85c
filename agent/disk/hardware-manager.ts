// The agent presents itself to the conductor as IPA's generic hardware manager: the conductor records this
// name and version from get_*_steps and sends them back as `clean_version`/`deploy_version`.
import { isDeepStrictEqual } from 'node:util';
import { VersionMismatch } from '../errors.ts';
import { hasTool } from '../exec.ts';

/** The key of the step lists in `clean_steps`/`deploy_steps`. */
export const HARDWARE_MANAGER_CLASS = 'GenericHardwareManager';
/** The key of `hardware_manager_version`. */
export const HARDWARE_MANAGER_NAME = 'generic_hardware_manager';
export const HARDWARE_MANAGER_VERSION = '1.2';

export interface StepDescription {
  step: string;
  priority: number;
  interface: string;
  reboot_requested: boolean;
  abortable: boolean;
  argsinfo?: Record<string, { description: string; required: boolean }>;
}

/**
 * The tool each step runs. A machine without it is not offered the step, so that Ironic refuses a request for
 * it up front rather than the step failing on the node: the ramdisk has no fio (image-build/packages.txt).
 */
const STEP_TOOLS: Readonly<Record<string, string>> = {
  burnin_cpu: 'stress-ng',
  burnin_memory: 'stress-ng',
  burnin_disk: 'fio',
  burnin_network: 'fio',
};

/** `steps` without those whose tool this machine lacks. */
export async function offeredSteps(steps: readonly StepDescription[]): Promise<StepDescription[]> {
  const out: StepDescription[] = [];
  for (const s of steps) {
    const tool = STEP_TOOLS[s.step];
    if (!tool || (await hasTool(tool))) out.push(s);
  }
  return out;
}

export function hardwareManagerVersions(): Record<string, string> {
  return { [HARDWARE_MANAGER_NAME]: HARDWARE_MANAGER_VERSION };
}

/** `{<kind>_steps: {GenericHardwareManager: steps}, hardware_manager_version: {…}}`, IPA's get_*_steps shape. */
export function stepsResult(
  kind: 'clean' | 'deploy' | 'service',
  steps: readonly StepDescription[],
): Record<string, unknown> {
  return {
    [`${kind}_steps`]: { [HARDWARE_MANAGER_CLASS]: steps },
    hardware_manager_version: hardwareManagerVersions(),
  };
}

/** Throws VersionMismatch (→ CLEAN_VERSION_MISMATCH) when the conductor recorded other versions than ours. */
export function checkVersions(provided: unknown): void {
  // A conductor that never recorded versions sends nothing (or an empty object): nothing to compare.
  if (provided === undefined || provided === null) return;
  if (typeof provided === 'object' && Object.keys(provided).length === 0) return;
  const ours = hardwareManagerVersions();
  if (!isDeepStrictEqual(provided, ours)) {
    throw new VersionMismatch(
      `Current versions: ${JSON.stringify(ours)}, versions provided by node: ${JSON.stringify(provided)}`,
    );
  }
}
