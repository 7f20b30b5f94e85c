// execute_<phase>_step, IPA's way: the versions the conductor recorded must be ours; the step is looked up by
// name among the managers that offer it for this phase, best first; a manager that declines the hardware
// (IncompatibleHardwareMethodError) passes it to the next; args are checked against argsinfo before anything
// runs; an error that is not one of IPA's classes becomes the phase's error.
import {
  AgentError,
  CleaningError,
  DeploymentError,
  errorText,
  HardwareManagerMethodNotFound,
  IncompatibleHardwareMethodError,
  ServicingError,
} from '../errors.ts';
import { isObject } from '../parse.ts';
import type { TaskContext } from '../services.ts';
import { nodeFromParams } from '../state.ts';
import { checkArgs } from './args.ts';
import type { StepCatalogue } from './catalogue.ts';
import type { Phase } from './step.ts';

export interface StepRequest {
  /** The step as the conductor sent it: `{step, interface, args, priority, …}`. */
  step: Record<string, unknown>;
  node?: Record<string, unknown>;
  ports?: unknown[];
  /** `<phase>_version`: the hardware_manager_version the conductor recorded. */
  version: unknown;
}

/** The error class of a step that failed in `phase` for a reason of its own (IPA's). */
export const PHASE_ERROR: Readonly<Record<Phase, new (details: string) => AgentError>> = {
  clean: CleaningError,
  deploy: DeploymentError,
  service: ServicingError,
};

export async function executeStep(
  catalogue: StepCatalogue,
  phase: Phase,
  req: StepRequest,
  ctx: TaskContext,
): Promise<unknown> {
  catalogue.checkVersions(req.version);
  const name = typeof req.step.step === 'string' ? req.step.step : '';
  const candidates = (await catalogue.available(phase, name)).filter(
    (c) => req.step.interface === undefined || req.step.interface === c.step.interface,
  );
  if (candidates.length === 0) {
    throw new HardwareManagerMethodNotFound(
      `No HardwareManager found to handle method: ${String(req.step.interface)}.${String(req.step.step)}`,
    );
  }
  const args = isObject(req.step.args) ? req.step.args : {};
  // The node in the params is the conductor's current view (lookup's may be sanitised): keep it.
  const current = nodeFromParams(req.node);
  if (current) ctx.state.update({ node: current });
  const stepCtx = { ...ctx, phase, node: req.node ?? ctx.state.status.node, ports: req.ports ?? [] };
  let declined: IncompatibleHardwareMethodError | undefined;
  for (const { className, step } of candidates) {
    checkArgs(step, args);
    try {
      return await step.run(args, stepCtx);
    } catch (err) {
      if (err instanceof IncompatibleHardwareMethodError && !ctx.signal.aborted) {
        ctx.log.info({ step: name, manager: className, why: err.details }, 'hardware manager declined the step');
        declined = err;
        continue;
      }
      if (err instanceof AgentError || ctx.signal.aborted) throw err;
      throw new PHASE_ERROR[phase](`Unexpected exception performing ${phase} step ${name}. ${errorText(err)}`);
    }
  }
  throw new HardwareManagerMethodNotFound(
    `No HardwareManager could handle ${name}: ${declined ? declined.details : 'every manager declined it'}`,
  );
}
