// The one table of extensions the agent serves: `<extension>.<method>` resolves here.
import { clean } from './extensions/clean.ts';
import { deploy } from './extensions/deploy.ts';
import { image } from './extensions/image.ts';
import { log } from './extensions/log.ts';
import { standby } from './extensions/standby.ts';
import type { Extension } from './types.ts';

export const extensions: Readonly<Record<string, Extension>> = {
  standby,
  deploy,
  clean,
  image,
  log,
};
