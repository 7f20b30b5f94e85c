// deploy: the in-band deploy steps this agent offers. Only `write_image` exists; it runs the same code as
// `standby.prepare_image`, and a bad `image_info` becomes this command's FAILED result (not an HTTP 400).
import { checkVersions, stepsResult, type StepDescription } from '../../disk/hardware-manager.ts';
import { AgentError } from '../../errors.ts';
import { prepareImage } from '../../image/prepare.ts';
import { isObject, optObject, reqObject } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { parsePrepareImage } from './standby.ts';

export class HardwareManagerMethodNotFound extends AgentError {
  static override summary = 'No HardwareManager found to handle method';
}

export const DEPLOY_STEPS: readonly StepDescription[] = [
  { step: 'write_image', priority: 80, interface: 'deploy', reboot_requested: false, abortable: false },
];

interface DeployStepParams {
  step: Record<string, unknown>;
  node?: Record<string, unknown>;
  deployVersion?: Record<string, unknown>;
}

function nodeHints(node: Record<string, unknown> | undefined): Record<string, unknown> | undefined {
  const fromInstance = isObject(node?.instance_info) ? node.instance_info.root_device : undefined;
  const fromProperties = isObject(node?.properties) ? node.properties.root_device : undefined;
  const hints = fromInstance ?? fromProperties;
  return isObject(hints) && Object.keys(hints).length > 0 ? hints : undefined;
}

export const deploy: Extension = {
  get_deploy_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: () => stepsResult('deploy', DEPLOY_STEPS),
  }),

  execute_deploy_step: command({
    mode: 'async',
    parse: (p): DeployStepParams => ({
      step: reqObject(p, 'step'),
      node: optObject(p, 'node'),
      deployVersion: optObject(p, 'deploy_version'),
    }),
    run: async (p, ctx) => {
      checkVersions(p.deployVersion);
      const { step } = p;
      if (step.interface !== 'deploy' || step.step !== 'write_image') {
        throw new HardwareManagerMethodNotFound(`No HardwareManager found to handle method: ${String(step.interface)}.${String(step.step)}`);
      }
      const args = isObject(step.args) ? step.args : {};
      const { info, configdrive } = parsePrepareImage(args, ctx.config);
      const message = await prepareImage(ctx, { info, configdrive, hints: nodeHints(p.node) });
      return { deploy_result: { result: `prepare_image: ${message}` }, deploy_step: step };
    },
  }),
};
