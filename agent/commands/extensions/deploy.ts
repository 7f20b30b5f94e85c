// deploy: the in-band deploy steps this agent offers, at IPA's priorities (all 0: the conductor's own
// out-of-band `write_image` (80) forwards to ours, the others run only when a deploy template or the user asks).
// `write_image` runs the same code as `standby.prepare_image`, `erase_devices_metadata` the cleaning step's
// code, `inject_files` writes files into the written image. Bad step arguments fail the command, as in IPA.
import { checkVersions, stepsResult, type StepDescription } from '../../disk/hardware-manager.ts';
import { injectFiles, parseInjectFiles, parseVerifyCa } from '../../disk/inject-files.ts';
import { AgentError } from '../../errors.ts';
import { prepareImage } from '../../image/prepare.ts';
import { rootHintsOf } from '../../disk/root-device.ts';
import { nodeFromParams } from '../../state.ts';
import { isObject, optObject, reqObject } from '../params.ts';
import { command, type CommandContext, type Extension } from '../types.ts';
import { cleanUefiNvramStep, MATCH_PATTERNS_ARGSINFO, runners as cleanRunners } from './clean.ts';
import { parsePrepareImage } from './standby.ts';

export class HardwareManagerMethodNotFound extends AgentError {
  static override summary = 'No HardwareManager found to handle method';
}

const step = (name: string, extra: Partial<StepDescription> = {}): StepDescription => ({
  step: name,
  priority: 0,
  interface: 'deploy',
  reboot_requested: false,
  abortable: false,
  ...extra,
});

export const DEPLOY_STEPS: readonly StepDescription[] = [
  step('erase_devices_metadata'),
  step('clean_uefi_nvram', { argsinfo: MATCH_PATTERNS_ARGSINFO }),
  step('write_image'),
  step('inject_files', {
    argsinfo: {
      files: {
        description:
          'Files to inject: a list of {path, partition, content (base64), deleted, mode, dirmode, owner, group}',
        // IPA's: the files may come from the node's inject_files property alone.
        required: false,
      },
      verify_ca: { description: 'Whether to verify TLS certificates when fetching content', required: false },
    },
  }),
];

/** The steps as get_deploy_steps advertises them: inject_files at ipa-inject-files-priority, as IPA does. */
export function deploySteps(injectFilesPriority: number): StepDescription[] {
  return DEPLOY_STEPS.map((s) => (s.step === 'inject_files' ? { ...s, priority: injectFilesPriority } : s));
}

interface DeployStepParams {
  step: Record<string, unknown>;
  node?: Record<string, unknown>;
  deployVersion?: Record<string, unknown>;
}

export type Runner = (
  args: Record<string, unknown>,
  node: Record<string, unknown> | undefined,
  ctx: CommandContext,
) => Promise<unknown>;

export const deployRunners: Readonly<Record<string, Runner>> = {
  async write_image(args, node, ctx) {
    const { info, configdrive } = parsePrepareImage(args, ctx.config);
    return { result: `prepare_image: ${await prepareImage(ctx, { info, configdrive, hints: rootHintsOf(node) })}` };
  },
  async erase_devices_metadata(_args, _node, ctx) {
    return cleanRunners.erase_devices_metadata!(ctx, {});
  },
  clean_uefi_nvram: (args, _node, ctx) => cleanUefiNvramStep(ctx, args),
  async inject_files(args, node, ctx) {
    // the node's inject_files property first, then the step's files, as IPA merges them
    const fromNode = parseInjectFiles(isObject(node?.properties) ? node.properties.inject_files : undefined);
    const files = [...fromNode, ...parseInjectFiles(args.files)];
    const verifyCa = parseVerifyCa(args.verify_ca);
    await injectFiles(ctx, files, rootHintsOf(node), { verifyCa, node, signal: ctx.signal });
    return null;
  },
};

/** Runs `step` from `runners` with IPA's dispatch rules: an unknown interface.step is HardwareManagerMethodNotFound. */
export async function runStep(
  runners: Readonly<Record<string, Runner>>,
  step: Record<string, unknown>,
  node: Record<string, unknown> | undefined,
  ctx: CommandContext,
): Promise<unknown> {
  const name = typeof step.step === 'string' ? step.step : '';
  const runner = step.interface === 'deploy' && Object.hasOwn(runners, name) ? runners[name] : undefined;
  if (!runner)
    throw new HardwareManagerMethodNotFound(
      `No HardwareManager found to handle method: ${String(step.interface)}.${String(step.step)}`,
    );
  // As for clean steps: what the steps read of the node (skip list, root device hints) is the conductor's now.
  const current = nodeFromParams(node);
  if (current) ctx.state.update({ node: current });
  return runner(isObject(step.args) ? step.args : {}, node, ctx);
}

export const deploy: Extension = {
  get_deploy_steps: command({
    mode: 'sync',
    parse: () => undefined,
    run: (_p, ctx) => stepsResult('deploy', deploySteps(ctx.config.injectFilesPriority)),
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
      return { deploy_result: await runStep(deployRunners, p.step, p.node, ctx), deploy_step: p.step };
    },
  }),
};
