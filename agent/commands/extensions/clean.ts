// clean: the in-band cleaning steps the conductor runs between deployments, listed and run from the step
// catalogue (agent/steps/: the built-in steps in builtin.ts, and the operator's plugins).
import type { StepCatalogue } from '../../steps/catalogue.ts';
import { stepCommands } from '../step-commands.ts';
import type { Extension } from '../types.ts';

export const clean = (catalogue: Promise<StepCatalogue>): Extension => stepCommands('clean', catalogue);
