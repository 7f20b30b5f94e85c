// standby: the commands that write the image and end a deployment (power off, reboot, flush).
import { partitionUuids, prepareImage } from '../../image/prepare.ts';
import { parsePrepareImage } from '../../steps/prepare-image-params.ts';
import { command, type Extension } from '../types.ts';

const noParams = () => undefined;

export const standby: Extension = {
  prepare_image: command({
    mode: 'async',
    parse: parsePrepareImage,
    run: (p, ctx) => prepareImage(ctx, { info: p.info, configdrive: p.configdrive }),
  }),

  get_partition_uuids: command({
    mode: 'sync',
    parse: noParams,
    run: (_p, ctx) => partitionUuids(ctx),
  }),

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
