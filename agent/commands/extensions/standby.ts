// standby: the commands that write the image and end a deployment (power off, reboot, flush).
import type { Config } from '../../config/config.ts';
import { InvalidCommandParamsError } from '../../errors.ts';
import { parseImageInfo, type ImageInfo } from '../../image/image-info.ts';
import { partitionUuids, prepareImage } from '../../image/prepare.ts';
import { optString } from '../params.ts';
import { command, type Extension, type Params } from '../types.ts';

const noParams = () => undefined;

export interface PrepareImageParams {
  info: ImageInfo;
  configdrive?: string;
}

/** The one validation of `prepare_image`'s params, shared with the `write_image` deploy step. */
export function parsePrepareImage(p: Params, config: Config): PrepareImageParams {
  const info = parseImageInfo(p.image_info, { md5Enabled: config.image.md5Enabled });
  if (info.imageType === 'partition') {
    throw new InvalidCommandParamsError('Partition images are not supported by this agent; deploy a whole-disk image');
  }
  return { info, configdrive: optString(p, 'configdrive') };
}

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
