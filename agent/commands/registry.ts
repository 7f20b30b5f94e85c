// The one table of extensions the agent serves: `<extension>.<method>` resolves here.
import { clean } from './extensions/clean.ts';
import { deploy } from './extensions/deploy.ts';
import { image } from './extensions/image.ts';
import { log } from './extensions/log.ts';
import { rescue } from './extensions/rescue.ts';
import { service } from './extensions/service.ts';
import { standby } from './extensions/standby.ts';
import { system } from './extensions/system.ts';
import type { Extension } from './types.ts';

export const extensions: Readonly<Record<string, Extension>> = {
  standby,
  deploy,
  clean,
  image,
  log,
  service,
  rescue,
  system,
};
