// standby: the commands that write the image and end a deployment (power off, reboot, flush).
import { command, type Extension } from '../types.ts';

const noParams = () => undefined;

export const standby: Extension = {
  sync: command({
    mode: 'sync',
    parse: noParams,
    run: async (_p, ctx) => {
      await ctx.host.sync();
      return null;
    },
  }),

  power_off: command({
    mode: 'async',
    parse: noParams,
    run: async (_p, ctx) => {
      await ctx.host.sync();
      ctx.host.schedule('poweroff');
      return null;
    },
  }),

  run_image: command({
    mode: 'async',
    parse: noParams,
    run: async (_p, ctx) => {
      await ctx.host.sync();
      ctx.host.schedule('reboot');
      return null;
    },
  }),
};
