// deploy: the in-band deploy steps this agent offers. Only `write_image` exists; it runs the same code as
// `standby.prepare_image`, and a bad `image_info` becomes this command's FAILED result (not an HTTP 400).
import { AgentError, VersionMismatch } from '../../errors.ts';
import { prepareImage } from '../../image/prepare.ts';
import { isObject, optObject, reqObject } from '../params.ts';
import { command, type Extension } from '../types.ts';
import { parsePrepareImage } from './standby.ts';

/** What `get_*_steps` reports as the hardware manager and its version; the conductor echoes it back. */
export const HARDWARE_MANAGER = { className: 'GenericHardwareManager', name: 'generic_hardware_manager', version: '1.2' };

export class HardwareManagerMethodNotFound extends AgentError {
  static override summary = 'No HardwareManager found to handle method';
}

export const DEPLOY_STEPS = [
  { step: 'write_image', priority: 80, interface: 'deploy', reboot_requested: false },
] as const;

interface DeployStepParams {
  step: Record<string, unknown>;
  node?: Record<string, unknown>;
  deployVersion?: Record<string, unknown>;
}

function checkVersion(given: Record<string, unknown> | undefined): void {
  if (!given || Object.keys(given).length === 0) return;
  const ours = { [HARDWARE_MANAGER.name]: HARDWARE_MANAGER.version };
  const mismatch = Object.entries(given).some(([name, version]) => ours[name] !== version) || !(HARDWARE_MANAGER.name in given);
  if (mismatch) {
    throw new VersionMismatch(`Hardware managers version mismatch: conductor has ${JSON.stringify(given)}, agent has ${JSON.stringify(ours)}`);
  }
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
    run: () => ({
      deploy_steps: { [HARDWARE_MANAGER.className]: DEPLOY_STEPS.map((s) => ({ ...s })) },
      hardware_manager_version: { [HARDWARE_MANAGER.name]: HARDWARE_MANAGER.version },
    }),
  }),

  execute_deploy_step: command({
    mode: 'async',
    parse: (p): DeployStepParams => ({
      step: reqObject(p, 'step'),
      node: optObject(p, 'node'),
      deployVersion: optObject(p, 'deploy_version'),
    }),
    run: async (p, ctx) => {
      checkVersion(p.deployVersion);
      const { step } = p;
      if (step.interface !== 'deploy' || step.step !== 'write_image') {
        throw new HardwareManagerMethodNotFound(`No HardwareManager found to handle method: ${String(step.interface)}.${String(step.step)}`);
      }
      const args = isObject(step.args) ? step.args : {};
      const { info, configdrive } = parsePrepareImage(args);
      const message = await prepareImage(ctx, { info, configdrive, hints: nodeHints(p.node) });
      return { deploy_result: { result: `prepare_image: ${message}` }, deploy_step: step };
    },
  }),
};
