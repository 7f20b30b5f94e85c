// clean: the in-band cleaning steps the conductor runs between deployments. The step list and the
// hardware-manager version come from disk/hardware-manager.ts; the steps erase every managed disk.
import { isObject, optObject, reqObject } from '../params.ts';
import type { AgentServices } from '../../services.ts';
import { command, type CommandContext, type Extension } from '../types.ts';
import { ProgressMeter } from '../../progress.ts';
import { CleaningError, InvalidCommandParamsError } from '../../errors.ts';
import { cleaningTargets } from '../../disk/clean-targets.ts';
import { eraseDevice, eraseMetadata, type EraseOptions } from '../../disk/erase.ts';
import { checkVersions, stepsResult, type StepDescription } from '../../disk/hardware-manager.ts';
import type { NodeInfo } from '../../state.ts';

export const CLEAN_STEPS: readonly StepDescription[] = [
  { step: 'erase_devices', priority: 10, interface: 'deploy', reboot_requested: false, abortable: true },
  { step: 'erase_devices_metadata', priority: 99, interface: 'deploy', reboot_requested: false, abortable: true },
];

interface ExecuteParams {
  step: Record<string, unknown> & { step: string };
  node?: NodeInfo;
  cleanVersion: unknown;
}

/** The erase options: the agent's config, overridden by what the conductor put in driver_internal_info. */
function eraseOptions(services: AgentServices): EraseOptions {
  const info = services.state.status.node?.driver_internal_info ?? {};
  const iterations = info.agent_erase_devices_iterations;
  const zeroize = info.agent_erase_devices_zeroize;
  return {
    discard: services.config.erase.discardFirst,
    randomPasses: Number.isInteger(iterations) && (iterations as number) >= 0 ? (iterations as number) : services.config.erase.randomPasses,
    finalZeroPass: typeof zeroize === 'boolean' ? zeroize : services.config.erase.finalZeroPass,
  };
}

export const runners: Record<string, (ctx: CommandContext) => Promise<unknown>> = {
  async erase_devices_metadata(services) {
    const disks = await cleaningTargets(services);
    for (const d of disks) await eraseMetadata(services, d.path, d.size);
    services.log.info({ disks: disks.map((d) => d.path) }, 'disk metadata erased');
    return null;
  },
  async erase_devices(ctx) {
    const opts = eraseOptions(ctx);
    const disks = await cleaningTargets(ctx);
    // While the step runs, its command_result shows the disk, the method or pass, and how far it got.
    const meter = new ProgressMeter((r) => ctx.progress(r), ctx.log, 'erase');
    try {
      for (const d of disks) {
        const method = await eraseDevice(ctx, d.path, d.size, opts, meter);
        ctx.log.info({ disk: d.path, method }, 'disk erased');
      }
    } finally {
      meter.finish();
    }
    return null;
  },
};

export const clean: Extension = {
  get_clean_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: () => stepsResult('clean', CLEAN_STEPS),
  }),

  execute_clean_step: command<ExecuteParams>({
    mode: 'async',
    parse: (p) => {
      const step = reqObject(p, 'step');
      if (typeof step.step !== 'string' || step.step === '') {
        throw new InvalidCommandParamsError(`Malformed clean_step, no "step" key: ${JSON.stringify(step)}`);
      }
      const node = optObject(p, 'node');
      return {
        step: step as ExecuteParams['step'],
        node: node && typeof node.uuid === 'string' ? asNode(node) : undefined,
        cleanVersion: p.clean_version,
      };
    },
    run: async (p, ctx) => {
      checkVersions(p.cleanVersion);
      // The node in the params is the conductor's current view (lookup's may be sanitised): keep it.
      if (p.node) ctx.state.update({ node: p.node });
      const runner = Object.hasOwn(runners, p.step.step) ? runners[p.step.step] : undefined;
      if (!runner) throw new CleaningError(`Clean step ${p.step.step} is not supported by this agent`);
      return { clean_result: await runner(ctx), clean_step: p.step };
    },
  }),
};

function asNode(node: Record<string, unknown>): NodeInfo {
  const obj = (v: unknown): Record<string, unknown> => (isObject(v) ? v : {});
  return {
    ...node,
    uuid: node.uuid as string,
    properties: obj(node.properties),
    instance_info: obj(node.instance_info),
    driver_internal_info: obj(node.driver_internal_info),
  };
}
