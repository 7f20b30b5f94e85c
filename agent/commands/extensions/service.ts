// service: servicing (Ironic API 1.87) runs in-band steps on an active node. The steps are deploy steps IPA
// also offers for servicing, all priority 0 and run only when asked for; the version check is cleaning's.
import { checkVersions, stepsResult } from '../../disk/hardware-manager.ts';
import { AgentError, ServicingError, errorText } from '../../errors.ts';
import { optObject, reqObject } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { DEPLOY_STEPS, deployRunners, runStep } from './deploy.ts';

const SERVICE_STEP_NAMES = new Set(['write_image', 'inject_files']);
export const SERVICE_STEPS = DEPLOY_STEPS.filter((s) => SERVICE_STEP_NAMES.has(s.step));
const serviceRunners = Object.fromEntries(Object.entries(deployRunners).filter(([name]) => SERVICE_STEP_NAMES.has(name)));

export const service: Extension = {
  get_service_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: () => stepsResult('service', SERVICE_STEPS),
  }),

  execute_service_step: command({
    mode: 'async',
    parse: (p) => ({ step: reqObject(p, 'step'), node: optObject(p, 'node'), serviceVersion: p.service_version }),
    run: async (p, ctx) => {
      checkVersions(p.serviceVersion);
      try {
        return { service_result: await runStep(serviceRunners, p.step, p.node, ctx), service_step: p.step };
      } catch (err) {
        if (err instanceof AgentError) throw err;
        throw new ServicingError(`Unexpected exception performing service step ${String(p.step.step)}: ${errorText(err)}`);
      }
    },
  }),
};
