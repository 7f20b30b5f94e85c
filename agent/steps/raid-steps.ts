// IPA's software RAID steps on the `raid` interface: delete_configuration and create_configuration (clean and
// service), apply_configuration (deploy and service) with its raid_config argument. A request's config is
// validated and planned in full before any disk is touched; the result is the config as given, which is what
// Ironic's post-step hook records as the node's raid_config.
import { createRaid, deleteRaid, planFor } from '../disk/md.ts';
import { InvalidCommandParamsError } from '../errors.ts';
import { isObject, parseBoolean } from '../parse.ts';
import type { ArgsInfo, StepContext } from './step.ts';

export const APPLY_CONFIGURATION_ARGSINFO: ArgsInfo = {
  raid_config: { description: 'The RAID configuration to apply.', required: true },
  delete_existing: {
    description:
      'Setting this to "True" indicates to delete existing RAID configuration prior to creating the new configuration. Default value is "True".',
    required: false,
  },
};

/** Builds `config` (validated and planned first); returns it, or {} when there is nothing to build. */
async function build(
  ctx: StepContext,
  config: unknown,
  how: 'lenient' | 'strict',
  deleteFirst: boolean,
): Promise<unknown> {
  const plan = await planFor(ctx, config, ctx.node, how);
  if (!plan) {
    ctx.log.info('the RAID config asks for no software RAID: nothing to build');
    return {};
  }
  if (deleteFirst) await deleteRaid(ctx);
  await createRaid(ctx, plan);
  return config;
}

export async function createConfigurationStep(_args: unknown, ctx: StepContext): Promise<unknown> {
  const node = ctx.node;
  return build(ctx, isObject(node) ? node.target_raid_config : undefined, 'lenient', false);
}

export async function deleteConfigurationStep(_args: unknown, ctx: StepContext): Promise<unknown> {
  const { arrays, holders } = await deleteRaid(ctx);
  ctx.log.info({ arrays, holders }, 'software RAID deleted');
  return null;
}

export async function applyConfigurationStep(
  args: Readonly<Record<string, unknown>>,
  ctx: StepContext,
): Promise<unknown> {
  if (!isObject(args.raid_config)) {
    throw new InvalidCommandParamsError(
      `raid_config must be an object with logical_disks, got ${JSON.stringify(args.raid_config)}`,
    );
  }
  const deleteExisting = args.delete_existing === undefined ? true : parseBoolean(args.delete_existing);
  if (deleteExisting === undefined) {
    throw new InvalidCommandParamsError(
      `delete_existing must be a boolean, got ${JSON.stringify(args.delete_existing)}`,
    );
  }
  return build(ctx, args.raid_config, 'strict', deleteExisting);
}
