// service: servicing (Ironic API 1.87) runs in-band steps on an active node. The steps are those IPA offers
// for servicing, all priority 0 and run only when asked for; the version check is cleaning's.
import { burninSteps } from '../../burnin/steps.ts';
import { checkVersions, offeredSteps, stepsResult, type StepDescription } from '../../disk/hardware-manager.ts';
import { AgentError, ServicingError, errorText } from '../../errors.ts';
import { optObject, reqObject } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { DEPLOY_STEPS, deployRunners, runStep, type Runner } from './deploy.ts';

const burnin = (name: string): StepDescription => ({
  step: name,
  priority: 0,
  interface: 'deploy',
  reboot_requested: false,
  abortable: true,
});

/**
 * IPA's service steps: the burn-ins but not burnin_disk (it destroys the instance's data), write_image, inject_files.
 */
export const SERVICE_STEPS: readonly StepDescription[] = [
  burnin('burnin_cpu'),
  burnin('burnin_memory'),
  burnin('burnin_network'),
  ...DEPLOY_STEPS.filter((s) => s.step === 'write_image' || s.step === 'inject_files'),
];
const serviceRunners: Readonly<Record<string, Runner>> = {
  write_image: deployRunners.write_image!,
  inject_files: deployRunners.inject_files!,
  burnin_cpu: (_args, node, ctx) => burninSteps.burnin_cpu(ctx, node),
  burnin_memory: (_args, node, ctx) => burninSteps.burnin_memory(ctx, node),
  burnin_network: (_args, node, ctx) => burninSteps.burnin_network(ctx, node),
};

export const service: Extension = {
  get_service_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: async () => stepsResult('service', await offeredSteps(SERVICE_STEPS)),
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
        throw new ServicingError(
          `Unexpected exception performing service step ${String(p.step.step)}: ${errorText(err)}`,
        );
      }
    },
  }),
};
