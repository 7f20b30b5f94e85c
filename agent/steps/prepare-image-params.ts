// The one validation of `standby.prepare_image`'s params, which are also the `write_image` step's args.
import type { Config } from '../config/config.ts';
import { InvalidCommandParamsError } from '../errors.ts';
import { parseImageInfo, type ImageInfo } from '../image/image-info.ts';

export interface PrepareImageParams {
  info: ImageInfo;
  configdrive?: string;
}

export function parsePrepareImage(p: Readonly<Record<string, unknown>>, config: Config): PrepareImageParams {
  const info = parseImageInfo(p.image_info, { md5Enabled: config.image.md5Enabled });
  if (info.imageType === 'partition') {
    throw new InvalidCommandParamsError('Partition images are not supported by this agent; deploy a whole-disk image');
  }
  const configdrive = p.configdrive;
  if (configdrive !== undefined && configdrive !== null && typeof configdrive !== 'string') {
    throw new InvalidCommandParamsError("'configdrive' must be a string");
  }
  return { info, configdrive: configdrive ?? undefined };
}
