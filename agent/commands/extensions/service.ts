// service: servicing (Ironic API 1.87) runs in-band steps on an active node, only those asked for; listed and
// run from the step catalogue (agent/steps/).
import type { StepCatalogue } from '../../steps/catalogue.ts';
import { stepCommands } from '../step-commands.ts';
import type { Extension } from '../types.ts';

export const service = (catalogue: Promise<StepCatalogue>): Extension => stepCommands('service', catalogue);
