// The one table of extensions the agent serves: `<extension>.<method>` resolves here. The step extensions
// (clean, deploy, service) and `hardware` read the agent's step catalogue (agent/steps/).
import type { StepCatalogue } from '../steps/catalogue.ts';
import { builtinCatalogue } from '../steps/plugins.ts';
import { clean } from './extensions/clean.ts';
import { deploy } from './extensions/deploy.ts';
import { hardware } from './extensions/hardware.ts';
import { image } from './extensions/image.ts';
import { log } from './extensions/log.ts';
import { rescue } from './extensions/rescue.ts';
import { service } from './extensions/service.ts';
import { standby } from './extensions/standby.ts';
import { system } from './extensions/system.ts';
import type { Extension } from './types.ts';

export function commandExtensions(catalogue: Promise<StepCatalogue>): Readonly<Record<string, Extension>> {
  return {
    standby,
    deploy: deploy(catalogue),
    clean: clean(catalogue),
    image,
    log,
    service: service(catalogue),
    rescue,
    system,
    hardware: hardware(catalogue),
  };
}

/** The extensions with the built-in steps only. */
export const extensions = commandExtensions(builtinCatalogue());
