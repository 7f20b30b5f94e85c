// The one table of extensions the agent serves: `<extension>.<method>` resolves here.
import { standby } from './extensions/standby.ts';
import type { Extension } from './types.ts';

export const extensions: Readonly<Record<string, Extension>> = {
  standby,
};
