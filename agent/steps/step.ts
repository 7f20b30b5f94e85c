// The shape of a step and of a hardware manager, built in or plugged in: one descriptor per step, one `run`
// signature. The catalogue (catalogue.ts) merges managers with IPA's rules; the clean, deploy and service
// extensions only list and dispatch from it.
import type { TaskContext } from '../services.ts';

/** The three step families Ironic asks an agent for: get_<phase>_steps, execute_<phase>_step. */
export type Phase = 'clean' | 'deploy' | 'service';
export const PHASES: readonly Phase[] = ['clean', 'deploy', 'service'];

/** IPA's argsinfo: `{arg: {description, required}}`; Ironic checks requests against it, and so does the agent. */
export type ArgsInfo = Readonly<Record<string, { description: string; required: boolean }>>;

export interface StepContext extends TaskContext {
  phase: Phase;
  /** The node as the conductor sent it with this step; without one, the node the agent last heard of. */
  node: Readonly<Record<string, unknown>> | undefined;
  ports: unknown[];
}

export interface StepDescriptor {
  /** IPA's `step`: the method name, and the key steps are dispatched and merged by. */
  name: string;
  /** Ironic's interface the step is listed under; Ironic runs agent steps of `deploy` and `raid` only. */
  interface: 'deploy' | 'raid';
  /** The phases that offer the step, each at its priority (0: run only when asked for). */
  phases: Readonly<Partial<Record<Phase, number>>>;
  /** Whether Ironic may abort the step while it runs (clean and service; a deploy step is never listed so). */
  abortable: boolean;
  /** Ironic reboots the node back into the ramdisk after the step succeeds. */
  reboot_requested: boolean;
  /** The step needs the agent's ramdisk (every in-band step does); refused in a `disable_ramdisk` clean. */
  requires_ramdisk: boolean;
  /**
   * The arguments the step takes. Given, the agent refuses a request with other arguments or without a required
   * one before the step runs. Absent (built-in steps whose arguments Ironic fills, write_image): the step's own
   * parser is the check.
   */
  argsinfo?: ArgsInfo;
  /** A tool the step runs: a machine without it is not offered the step (the ramdisk has no fio). */
  tool?: string;
  run(args: Readonly<Record<string, unknown>>, ctx: StepContext): Promise<unknown>;
}

/** IPA's HardwareSupport levels; any integer counts, 0 drops the manager. */
export const SUPPORT = { NONE: 0, GENERIC: 1, MAINLINE: 2, SERVICE_PROVIDER: 3 } as const;

export interface HardwareManager {
  /** The key of `hardware_manager_version` (IPA's HARDWARE_MANAGER_NAME). */
  name: string;
  /** The key the manager's steps are listed under (IPA's class name); default: `name`. */
  className?: string;
  version: string;
  /** Evaluated once, when the catalogue is built: higher wins a step name shared with another manager. */
  evaluateHardwareSupport(): number | Promise<number>;
  steps: readonly StepDescriptor[];
}
