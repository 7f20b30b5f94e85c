// system: `lockdown`, which newer Ironic sends at the end of a deploy or servicing of a node with
// `disable_power_off`: the reply goes first, then the agent stops its API and heartbeat, takes every NIC down
// (in a ramdisk; simulated elsewhere) and idles without exiting until the conductor reboots the machine.
import { command, type Extension } from '../types.ts';

export const system: Extension = {
  lockdown: command({
    mode: 'sync',
    parse: () => undefined,
    run: async (_p, ctx) => {
      await ctx.host.sync();
      ctx.host.quiesce('lockdown');
      return null;
    },
  }),
};
