// Puts a checked config drive on a whole-disk image's disk: reuse the partition labelled config-2, or add a
// 64 MiB one at the end (GPT: sgdisk, MBR: parted, in explicit sectors); then write it with direct I/O and
// read it back. A drive whose filesystem sectors are smaller than the disk's logical sectors (ISO9660
// on a 4 KiB disk) is rebuilt as VFAT first. Every write goes through the device guard first.
import { createHash, randomUUID } from 'node:crypto';
import { open, writeFile } from 'node:fs/promises';
import { withTempDir } from '../host/temp-dir.ts';
import { join } from 'node:path';
import type { AgentServices } from '../services.ts';
import { ConfigDriveError } from '../errors.ts';
import { run } from '../exec.ts';
import { rebuildAsVfat } from './fat.ts';
import { isConfigDriveLabel } from './format.ts';
import type { ConfigDriveImage } from './prepare.ts';
import { listPartitions, rescanPartitions, tableType, type Partition } from '../disk/partitions.ts';
import { mbrTailRegion, readTable, tailPlacement, MiB, type Region, type TableEntry } from '../disk/partition-table.ts';
import { kernelNameOf, logicalSectorSize, partitionName, SYS_BLOCK } from '../disk/sysfs.ts';
import { readSys } from '../host/sysfs.ts';

export const CONFIG_DRIVE_PARTITION_BYTES = 64 * MiB;

type Services = Pick<AgentServices, 'config' | 'log' | 'guard'>;

async function diskGeometry(disk: string): Promise<{ bytes: number; sectorSize: number }> {
  const name = kernelNameOf(disk);
  const sectors = Number(await readSys(`${SYS_BLOCK}/${name}/size`));
  return { bytes: sectors * 512, sectorSize: await logicalSectorSize(disk) };
}

async function existingConfigDrive(services: Services, disk: string): Promise<Partition | null> {
  // The kernel lists the partitions it knows: until it has dropped those the disk's table no longer has, one
  // of an older layout could be found below by its label.
  const table = await readTable(disk, services.log);
  await rescanPartitions(
    disk,
    services.log,
    table.map((e) => e.number),
    { onlyExpected: true },
  );
  const found = (await listPartitions(disk, services.log)).filter((p) => isConfigDriveLabel(p.label));
  if (found.length > 1) {
    throw new ConfigDriveError(
      `More than one partition with label "config-2" exists on device ${disk}: ${found.map((p) => p.path).join(', ')}`,
    );
  }
  const drive = found[0];
  if (!drive) return null;
  // The rescan above left the kernel only partitions the table has; it may still have one at an older place.
  const entry = table.find((e) => e.number === drive.number)!;
  if (entry.start === drive.start && entry.size === drive.size) return drive;
  // The kernel is behind the table: once it has the partition where the table puts it, look again there.
  await rescanPartitions(disk, services.log, [entry]);
  return existingConfigDrive(services, disk);
}

function noRoom(disk: string, region: Region, sectorSize: number): ConfigDriveError {
  const free = Math.max(0, (region.last - region.first + 1) * sectorSize);
  return new ConfigDriveError(
    `No room for a ${CONFIG_DRIVE_PARTITION_BYTES / MiB} MiB config drive partition on ${disk}: the largest free region at the end holds ${(free / MiB).toFixed(1)} MiB`,
  );
}

async function addGptPartition(services: Services, disk: string, sectorSize: number): Promise<TableEntry> {
  const log = services.log;
  // Images are often smaller than the disk, so the backup GPT is moved to the real end (-e) in the same
  // run that adds the partition; the dry run (-P) measures the free space as it will be after that move.
  const { stdout } = await run('sgdisk', ['-P', '-e', '-F', '-E', disk], { log });
  const numbers = stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => /^\d+$/.test(l))
    .map(Number);
  const [first, last] = numbers.slice(-2);
  if (first === undefined || last === undefined) throw new ConfigDriveError(`sgdisk found no free space on ${disk}`);
  const place = tailPlacement({ first, last }, CONFIG_DRIVE_PARTITION_BYTES, sectorSize);
  if (!place) throw noRoom(disk, { first, last }, sectorSize);
  const uuid = randomUUID();
  await run('sgdisk', ['-e', '-n', `0:${place.first}:${place.last}`, '-t', '0:8300', '-u', `0:${uuid}`, disk], { log });
  const created = (await readTable(disk, log)).find((e) => e.uuid === uuid);
  if (!created)
    throw new ConfigDriveError(`The config drive partition with UUID ${uuid} was not found on ${disk} after creation`);
  return created;
}

async function addMbrPartition(
  services: Services,
  disk: string,
  bytes: number,
  sectorSize: number,
): Promise<TableEntry> {
  const log = services.log;
  const before = await readTable(disk, log);
  const primaries = before.filter((e) => e.number <= 4);
  if (primaries.length >= 4) {
    throw new ConfigDriveError(
      `Config drive cannot be created: disk ${disk} uses MBR partitioning and already has ${primaries.length} primary partitions`,
    );
  }
  const region = mbrTailRegion(before, bytes, sectorSize);
  const place = tailPlacement(region, CONFIG_DRIVE_PARTITION_BYTES, sectorSize);
  if (!place) throw noRoom(disk, region, sectorSize);
  await run(
    'parted',
    ['-s', '-a', 'minimal', '--', disk, 'unit', 's', 'mkpart', 'primary', 'fat32', `${place.first}s`, `${place.last}s`],
    { log },
  );
  const known = new Set(before.map((e) => e.number));
  const added = (await readTable(disk, log)).filter((e) => !known.has(e.number));
  if (added.length !== 1) {
    throw new ConfigDriveError(
      `Disk partitioning failed on device ${disk}: unable to find the new config drive partition`,
    );
  }
  return added[0]!;
}

async function createPartition(services: Services, disk: string): Promise<string> {
  const { bytes, sectorSize } = await diskGeometry(disk);
  const table = await tableType(disk, services.log);
  if (!table)
    throw new ConfigDriveError(`Disk ${disk} has no partition table, so a config drive partition cannot be added`);
  const created =
    table === 'gpt'
      ? await addGptPartition(services, disk, sectorSize)
      : await addMbrPartition(services, disk, bytes, sectorSize);
  await rescanPartitions(disk, services.log, [created]);
  return `/dev/${partitionName(kernelNameOf(disk), created.number)}`;
}

function padTo(buf: Buffer, multiple: number): Buffer {
  const rest = buf.length % multiple;
  return rest === 0 ? buf : Buffer.concat([buf, Buffer.alloc(multiple - rest)]);
}

async function readBack(path: string, length: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(length);
    let done = 0;
    while (done < length) {
      const { bytesRead } = await fh.read(buf, done, length - done, done);
      if (bytesRead === 0) break;
      done += bytesRead;
    }
    return buf.subarray(0, done);
  } finally {
    await fh.close();
  }
}

async function writeVerified(services: Services, partition: string, image: Buffer): Promise<void> {
  const log = services.log;
  await withTempDir('ina-configdrive-', async (work) => {
    const file = join(work, 'drive.img');
    await writeFile(file, image);
    await services.guard.assertWritable(partition, 'write the config drive to');
    await run('dd', [`if=${file}`, `of=${partition}`, 'bs=1M', 'oflag=direct', 'conv=fsync,notrunc', 'status=none'], {
      log,
    });
    await run('blockdev', ['--flushbufs', partition], { log });
    const want = createHash('sha256').update(image).digest('hex');
    const got = createHash('sha256')
      .update(await readBack(partition, image.length))
      .digest('hex');
    if (got !== want)
      throw new ConfigDriveError(
        `Config drive read back from ${partition} does not match what was written (sha256 ${got}, expected ${want})`,
      );
  });
}

/** Writes `drive` to `disk`'s config-2 partition, creating it when there is none; returns that partition. */
export async function writeConfigDrivePartition(
  services: Services,
  disk: string,
  drive: ConfigDriveImage,
): Promise<{ partition: string }> {
  await services.guard.assertWritable(disk, 'add a config drive partition to');
  const existing = await existingConfigDrive(services, disk);
  const partition = existing?.path ?? (await createPartition(services, disk));
  const partName = kernelNameOf(partition);
  const partBytes = Number(await readSys(`${SYS_BLOCK}/${kernelNameOf(disk)}/${partName}/size`)) * 512;
  const { sectorSize } = await diskGeometry(disk);

  const rebuild = drive.sectorSize < sectorSize;
  const image = padTo(
    rebuild
      ? await rebuildAsVfat(drive, Math.min(partBytes, CONFIG_DRIVE_PARTITION_BYTES), sectorSize, services.log)
      : drive.bytes,
    sectorSize,
  );
  if (image.length > partBytes) {
    throw new ConfigDriveError(
      `Config drive (${image.length} bytes) does not fit partition ${partition} (${partBytes} bytes)`,
    );
  }
  await writeVerified(services, partition, image);
  services.log.info(
    { disk, partition, reused: existing !== null, format: rebuild ? 'vfat (rebuilt)' : drive.format },
    'config drive written',
  );
  return { partition };
}
