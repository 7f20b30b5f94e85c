// `standby.prepare_image`, start to end: decode the config drive (a bad one leaves the disk untouched),
// choose the root device, write the image, check that the disk now has a partition table, add the config
// drive, and remember the partition UUIDs for `standby.get_partition_uuids`.
import type { AgentServices } from '../services.ts';
import type { TaskContext as CommandContext } from '../services.ts';
import { prepareConfigDrive, writeConfigDrivePartition, type ConfigDriveImage } from '../configdrive/prepare.ts';
import { configDriveRoomCheck, ROOM_HEAD_BYTES } from '../configdrive/room.ts';
import { readPartitionUuids } from '../disk/partition-uuids.ts';
import { chooseRootDevice } from '../disk/root-device.ts';
import { DeploymentError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';
import type { ImageInfo } from './image-info.ts';
import { bufferBudget } from './buffer.ts';
import { writeImage } from './pipeline.ts';
import { shownUrl } from './url-credentials.ts';
import { clearSignatures } from '../disk/signatures.ts';
import { ProgressMeter, type ProgressReport } from '../progress.ts';

export function partitionUuids(services: Pick<AgentServices, 'state' | 'log'>): Record<string, string> {
  const uuids = services.state.lastImageUuids;
  if (!uuids) services.log.warn('get_partition_uuids called before any image was written');
  return uuids ?? {};
}

/** IPA's check after writing (the kernel re-read the table already): parted must find at least one partition. */
async function checkPartitionTable(disk: string, log: Logger): Promise<void> {
  let out: string;
  try {
    out = (await run('parted', ['-s', '-m', disk, 'unit', 'MiB', 'print'], { log })).stdout;
  } catch (err) {
    throw new DeploymentError(
      'Unable to find a valid partition table on the disk after writing the image. The image may be corrupted ' +
        `or it uses a different sector size than the device. Error: ${errorText(err)}`,
    );
  }
  const partitions = out.split('\n').filter((line) => /^\d+:/.test(line));
  if (partitions.length === 0)
    throw new DeploymentError(`No partitions found on the device ${disk} after writing the image.`);
}

export interface PrepareRequest {
  info: ImageInfo;
  /** The explicit `configdrive` argument; null/undefined falls back to the legacy `image_info.configdrive`. */
  configdrive?: string | null;
  /** Root device hints; default: the node's. */
  hints?: Record<string, unknown>;
}

export async function prepareImage(ctx: CommandContext, req: PrepareRequest): Promise<string> {
  const { info } = req;
  const log = ctx.log.child({ image: info.id, node: info.nodeUuid });
  const services = { ...ctx, log };
  const meter = new ProgressMeter((r: ProgressReport) => ctx.progress(r), log);
  try {
    return await deployImage(ctx, req, services, meter);
  } finally {
    meter.finish();
  }
}

async function deployImage(
  ctx: CommandContext,
  req: PrepareRequest,
  services: CommandContext,
  meter: ProgressMeter,
): Promise<string> {
  const { info } = req;
  const { log } = services;
  const configdrive = req.configdrive ?? info.configdrive;
  let drive: ConfigDriveImage | undefined;
  if (configdrive !== undefined && configdrive !== null) {
    meter.start('configdrive', null);
    drive = await prepareConfigDrive(services, configdrive, ctx.signal);
  }

  meter.start('device', null);
  const device = await chooseRootDevice(ctx, req.hints);
  // A write that fails may already have changed the disk, so the UUIDs of the image before cannot be trusted;
  // one that fails before writing (a 404, a refusal) forgets them too, which costs nothing.
  ctx.state.lastImageUuids = null;
  // What the conductor computed (with image_download_source=local it may have converted the image and
  // recomputed its checksum): the first thing to compare when a deploy fails verification.
  const { checksum } = info;
  log.info(
    {
      urls: info.urls.map(shownUrl),
      disk_format: info.diskFormat ?? null,
      stream_raw_images: info.streamRaw,
      checksum: {
        field: checksum.field,
        algo: checksum.algo ?? null,
        value: checksum.isUrl ? shownUrl(checksum.value) : checksum.value,
      },
    },
    'image requested',
  );
  const { signal } = ctx;
  // Whether the config drive will fit is decided from the image before the disk changes (a stream whose head
  // cannot tell goes the buffered way); a refusal leaves the disk as it was.
  // The buffered way only for what the buffer would take: the room of a larger one is judged after the write.
  const undecided = {
    log,
    buffers: async (bytes: number | undefined) =>
      bytes !== undefined &&
      (await bufferBudget(services.config.image.bufferDir, bytes).then(
        () => true,
        () => false,
      )),
  };
  const target = drive
    ? { ...device, precheck: configDriveRoomCheck(device, drive, undecided), precheckHeadBytes: ROOM_HEAD_BYTES }
    : device;
  const written = await writeImage({ services, info, device: target, meter, signal });
  log.info({ device: device.path, path: written.path, bytes: written.bytes }, 'image written');

  let uuids: Record<string, string>;
  try {
    signal.throwIfAborted();
    meter.start('check', null);
    await checkPartitionTable(device.path, log);
    if (drive) {
      signal.throwIfAborted();
      meter.start('configdrive', drive.bytes.length);
      await writeConfigDrivePartition(services, device.path, drive);
    }
    uuids = await readPartitionUuids(services, device.path);
    signal.throwIfAborted();
  } catch (err) {
    // A cancelled deploy leaves nothing bootable behind, as a failed write does; the image is whole, but the
    // deployment it belonged to is forgotten.
    if (signal.aborted) {
      await clearSignatures(device.path, device.size, ctx.guard, log).catch((e) =>
        log.warn({ device: device.path, err: errorText(e) }, 'could not clear a cancelled deployment'),
      );
    }
    throw err;
  }
  ctx.state.lastImageUuids = uuids;

  let message = `image (${info.id}) written to device ${device.path} root_uuid=${uuids['root uuid']}`;
  const esp = uuids['efi system partition uuid'];
  if (info.deployBootMode === 'uefi' && esp) message += ` efi_system_partition_uuid=${esp}`;
  return message;
}
