// The burn-in steps by name, each given the node whose driver_info configures it (IPA reads it there).
import type { TaskContext as CommandContext } from '../services.ts';
import { fioDisk, fioNetwork } from './fio.ts';
import { driverInfo } from './settings.ts';
import { stressNg } from './stress-ng.ts';

export type BurninStep = (ctx: CommandContext, node: Record<string, unknown> | undefined) => Promise<null>;

export const burninSteps: Readonly<
  Record<'burnin_cpu' | 'burnin_memory' | 'burnin_disk' | 'burnin_network', BurninStep>
> = {
  burnin_cpu: (ctx, node) => stressNg(ctx, 'cpu', driverInfo(node)),
  burnin_memory: (ctx, node) => stressNg(ctx, 'memory', driverInfo(node)),
  burnin_disk: (ctx, node) => fioDisk(ctx, driverInfo(node)),
  burnin_network: (ctx, node) => fioNetwork(ctx, driverInfo(node)),
};
