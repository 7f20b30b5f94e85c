// Every built-in step, in one table: the agent's generic hardware manager, presented to the conductor as
// IPA's (same name and version, so that a conductor that recorded IPA's versions sees no mismatch).
// Priorities are IPA's: on cleaning, the metadata erase (99) runs before the full erase (10); every other
// step runs only when asked for (manual cleaning, a deploy template, servicing). Ironic's own out-of-band
// `write_image` (80) forwards to ours.
import { burninSteps } from '../burnin/steps.ts';
import { eraseDevices, eraseDevicesExpress, eraseDevicesMetadata } from './erase-steps.ts';
import { cleanUefiNvramStep, erasePstoreStep, MATCH_PATTERNS_ARGSINFO } from './firmware-steps.ts';
import { INJECT_FILES_ARGSINFO, injectFilesStep, writeImageStep } from './image-steps.ts';
import {
  APPLY_CONFIGURATION_ARGSINFO,
  applyConfigurationStep,
  createConfigurationStep,
  deleteConfigurationStep,
} from './raid-steps.ts';
import { SUPPORT, type HardwareManager, type StepDescriptor } from './step.ts';

/** The key of the step lists in `clean_steps`/`deploy_steps` (IPA's class name). */
export const GENERIC_CLASS = 'GenericHardwareManager';
/** The key of `hardware_manager_version`. */
export const GENERIC_NAME = 'generic_hardware_manager';
export const GENERIC_VERSION = '1.2';

type Fields = Omit<StepDescriptor, 'name' | 'run' | 'reboot_requested' | 'requires_ramdisk' | 'interface'> &
  Partial<Pick<StepDescriptor, 'interface'>>;
const step = (name: string, fields: Fields, run: StepDescriptor['run']): StepDescriptor => ({
  name,
  interface: 'deploy',
  reboot_requested: false,
  requires_ramdisk: true,
  ...fields,
  run,
});

export const BUILTIN_STEPS: readonly StepDescriptor[] = [
  step('erase_devices', { phases: { clean: 10 }, abortable: true }, (args, ctx) => eraseDevices(ctx, args)),
  step('erase_devices_metadata', { phases: { clean: 99, deploy: 0 }, abortable: true }, (_a, ctx) =>
    eraseDevicesMetadata(ctx),
  ),
  step('erase_devices_express', { phases: { clean: 0 }, abortable: true }, (args, ctx) =>
    eraseDevicesExpress(ctx, args),
  ),
  step('erase_pstore', { phases: { clean: 0 }, abortable: true }, (_a, ctx) => erasePstoreStep(ctx)),
  step(
    'clean_uefi_nvram',
    { phases: { clean: 0, deploy: 0 }, abortable: true, argsinfo: MATCH_PATTERNS_ARGSINFO },
    cleanUefiNvramStep,
  ),
  // burnin_disk is no service step: it destroys the instance's data.
  step('burnin_cpu', { phases: { clean: 0, service: 0 }, abortable: true, tool: 'stress-ng' }, (_a, ctx) =>
    burninSteps.burnin_cpu(ctx, ctx.node),
  ),
  step('burnin_disk', { phases: { clean: 0 }, abortable: true, tool: 'fio' }, (_a, ctx) =>
    burninSteps.burnin_disk(ctx, ctx.node),
  ),
  step('burnin_memory', { phases: { clean: 0, service: 0 }, abortable: true, tool: 'stress-ng' }, (_a, ctx) =>
    burninSteps.burnin_memory(ctx, ctx.node),
  ),
  step('burnin_network', { phases: { clean: 0, service: 0 }, abortable: true, tool: 'fio' }, (_a, ctx) =>
    burninSteps.burnin_network(ctx, ctx.node),
  ),
  step('write_image', { phases: { deploy: 0, service: 0 }, abortable: false }, writeImageStep),
  // Software RAID (interface raid): only on request (manual cleaning, a deploy template, servicing).
  step(
    'delete_configuration',
    { interface: 'raid', phases: { clean: 0, service: 0 }, abortable: true },
    deleteConfigurationStep,
  ),
  step(
    'create_configuration',
    { interface: 'raid', phases: { clean: 0, service: 0 }, abortable: true },
    createConfigurationStep,
  ),
  step(
    'apply_configuration',
    // IPA lists it without `abortable`: no phase may abort it half-way through building arrays.
    { interface: 'raid', phases: { deploy: 0, service: 0 }, abortable: false, argsinfo: APPLY_CONFIGURATION_ARGSINFO },
    applyConfigurationStep,
  ),
  step(
    'inject_files',
    { phases: { deploy: 0, service: 0 }, abortable: false, argsinfo: INJECT_FILES_ARGSINFO },
    injectFilesStep,
  ),
];

/**
 * The agent's own manager. `inject_files` is listed for deploys at `ipa-inject-files-priority` (0: run only when
 * a deploy template asks for it), as IPA advertises it; its service priority stays 0.
 */
export function genericManager(injectFilesPriority = 0): HardwareManager {
  return {
    name: GENERIC_NAME,
    className: GENERIC_CLASS,
    version: GENERIC_VERSION,
    evaluateHardwareSupport: () => SUPPORT.GENERIC,
    steps: BUILTIN_STEPS.map((s) =>
      s.name === 'inject_files' ? { ...s, phases: { ...s.phases, deploy: injectFilesPriority } } : s,
    ),
  };
}

export const GENERIC_MANAGER: HardwareManager = genericManager();
