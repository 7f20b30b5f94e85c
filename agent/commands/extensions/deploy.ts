// deploy: the in-band deploy steps (Ironic's out-of-band `write_image` forwards to ours; the others run when a
// deploy template or the user asks), listed and run from the step catalogue (agent/steps/).
import type { StepCatalogue } from '../../steps/catalogue.ts';
import { stepCommands } from '../step-commands.ts';
import type { Extension } from '../types.ts';

export const deploy = (catalogue: Promise<StepCatalogue>): Extension => stepCommands('deploy', catalogue);
