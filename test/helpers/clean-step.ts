// One clean step through the agent's API, as a conductor sends it: the step from the agent's own catalogue
// with the test's args, a node whose driver_info carries the step's settings, polled to its end.
import { builtinStep, hardwareManagerVersions } from './builtin-steps.ts';
import type { AgentClient, CommandResult } from './agent-client.ts';

export function runCleanStep(
  c: AgentClient,
  name: string,
  args: Record<string, unknown> = {},
  driverInfo: Record<string, unknown> = {},
  driverInternalInfo: Record<string, unknown> = {},
): Promise<CommandResult> {
  const step = { ...builtinStep('clean', name), args };
  const node = {
    uuid: '2005a784-89ea-4482-b56a-65497029a47e',
    properties: {},
    instance_info: {},
    driver_internal_info: driverInternalInfo,
    driver_info: driverInfo,
  };
  return c.command(
    'clean.execute_clean_step',
    { step, node, ports: [], clean_version: hardwareManagerVersions() },
    { poll: true },
  );
}
