// get_<phase>_steps and execute_<phase>_step, the same two commands for cleaning, deployment and servicing:
// both only read the step catalogue (agent/steps/), which holds every step and its manager.
import { InvalidCommandParamsError } from '../errors.ts';
import type { StepCatalogue } from '../steps/catalogue.ts';
import { executeStep } from '../steps/dispatch.ts';
import type { Phase } from '../steps/step.ts';
import { optArray, optObject, reqObject } from './params.ts';
import { command, type Extension } from './types.ts';

export function stepCommands(phase: Phase, catalogue: Promise<StepCatalogue>): Extension {
  return {
    [`get_${phase}_steps`]: command({
      mode: 'sync',
      parse: () => undefined,
      run: async () => (await catalogue).list(phase),
    }),

    [`execute_${phase}_step`]: command({
      mode: 'async',
      parse: (p) => {
        const step = reqObject(p, 'step');
        if (typeof step.step !== 'string' || step.step === '') {
          throw new InvalidCommandParamsError(`Malformed ${phase}_step, no "step" key: ${JSON.stringify(step)}`);
        }
        return { step, node: optObject(p, 'node'), ports: optArray(p, 'ports'), version: p[`${phase}_version`] };
      },
      run: async (req, ctx) => ({
        [`${phase}_result`]: await executeStep(await catalogue, phase, req, ctx),
        [`${phase}_step`]: req.step,
      }),
    }),
  };
}
