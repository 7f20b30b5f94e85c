// hardware: `get_managers`, what the agent serves steps from: each hardware manager's name, class, version,
// support level and steps, and every plugin left out with its reason. With a plugin left out the command fails
// (HardwareManagerConfigurationError naming each), which is how that reason reaches GET /v1/commands/: the agent
// runs it once as it starts (agent.ts).
import { HardwareManagerConfigurationError } from '../../errors.ts';
import type { StepCatalogue } from '../../steps/catalogue.ts';
import { command, type Extension } from '../types.ts';

export const hardware = (catalogue: Promise<StepCatalogue>): Extension => ({
  get_managers: command({
    mode: 'sync',
    parse: () => undefined,
    run: async () => {
      const c = await catalogue;
      if (c.failures.length > 0) {
        throw new HardwareManagerConfigurationError(
          `${c.failures.length} hardware manager plugin(s) left out: ${c.failures
            .map((f) => `${f.source}: ${f.reason}`)
            .join('; ')}`,
        );
      }
      return { managers: c.managers(), failures: [] };
    },
  }),
});
