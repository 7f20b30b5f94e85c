// What the scenarios check on the node's disk (a loop device), read straight from the device.
import { randomBytes } from 'node:crypto';
import { open, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { MARKER_PATH, type BuiltImage } from './images.ts';

const MiB = 1024 * 1024;

export async function readRange(path: string, offset: number, length: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const buf = Buffer.alloc(length);
    const { bytesRead } = await fh.read(buf, 0, length, offset);
    return buf.subarray(0, bytesRead);
  } finally {
    await fh.close();
  }
}

async function writeRange(path: string, offset: number, data: Buffer): Promise<void> {
  const fh = await open(path, 'r+');
  try {
    await fh.write(data, 0, data.length, offset);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/** Leaves something for cleaning to remove: a GPT, and random bytes in the middle and at the end. */
export async function dirtyDisk(dev: string, sizeBytes: number): Promise<void> {
  await execa('sgdisk', ['-o', '-n', '1:2048:+8M', '-c', '1:stale', dev]);
  await writeRange(dev, Math.floor(sizeBytes / 2), randomBytes(MiB));
  await writeRange(dev, sizeBytes - 2 * MiB, randomBytes(MiB));
}

/** Offset of the first non-zero byte, or null when the whole device reads as zeros. */
export async function firstNonZero(dev: string, sizeBytes: number): Promise<number | null> {
  for (let off = 0; off < sizeBytes; off += 4 * MiB) {
    const chunk = await readRange(dev, off, Math.min(4 * MiB, sizeBytes - off));
    const i = chunk.findIndex((b) => b !== 0);
    if (i >= 0) return off + i;
  }
  return null;
}

export interface DiskPartition {
  node: string;
  start: number;
  size: number;
  name?: string;
}

/** The partition table as sfdisk reads it from the device; [] when there is none. */
export async function partitionTable(dev: string): Promise<{ label: string | null; partitions: DiskPartition[] }> {
  const r = await execa('sfdisk', ['--json', dev], { reject: false });
  if (r.exitCode !== 0 || r.stdout.trim() === '') return { label: null, partitions: [] };
  const table = (JSON.parse(r.stdout) as { partitiontable: { label: string; partitions?: DiskPartition[] } })
    .partitiontable;
  return { label: table.label, partitions: table.partitions ?? [] };
}

/** Copies a partition (in 512-byte sectors, as sfdisk reports it) into a temp file for read-only tools. */
async function extract(dev: string, p: DiskPartition, dir: string, name: string): Promise<string> {
  const file = join(dir, name);
  await writeFile(file, await readRange(dev, p.start * 512, p.size * 512));
  return file;
}

/** The image's payload (its root partition) is on the disk byte for byte, and its marker file is readable. */
export async function imagePayloadOnDisk(
  dev: string,
  raw: BuiltImage,
): Promise<{ bytesMatch: boolean; marker: string }> {
  const { start, end } = raw.root;
  const onDisk = await readRange(dev, start, end - start);
  const expected = await readRange(raw.file, start, end - start);
  const dir = await mkdtemp(join(tmpdir(), 'ina-root-'));
  try {
    const fs = join(dir, 'root.ext4');
    await writeFile(fs, onDisk);
    const cat = await execa('debugfs', ['-R', `cat ${MARKER_PATH}`, fs], { reject: false });
    return { bytesMatch: onDisk.equals(expected), marker: cat.stdout.trim() };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

export interface ConfigDriveContents {
  partition: DiskPartition;
  volumeId: string;
  metaData: Record<string, unknown>;
  userData: string;
  networkData: Record<string, unknown>;
}

/** Finds the partition holding an ISO 9660 volume labelled config-2 and reads the OpenStack files from it. */
export async function readConfigDrive(dev: string): Promise<ConfigDriveContents | null> {
  const { partitions } = await partitionTable(dev);
  for (const p of partitions) {
    const pvd = await readRange(dev, p.start * 512 + 32 * 1024, 2048);
    if (pvd.subarray(1, 6).toString('latin1') !== 'CD001') continue;
    const volumeId = pvd.subarray(40, 72).toString('latin1').trim();
    if (volumeId !== 'config-2') continue;
    const dir = await mkdtemp(join(tmpdir(), 'ina-cd-'));
    try {
      const iso = await extract(dev, p, dir, 'config-2.iso');
      const file = async (path: string) => (await execa('isoinfo', ['-R', '-i', iso, '-x', path])).stdout;
      return {
        partition: p,
        volumeId,
        metaData: JSON.parse(await file('/openstack/latest/meta_data.json')) as Record<string, unknown>,
        userData: await file('/openstack/latest/user_data'),
        networkData: JSON.parse(await file('/openstack/latest/network_data.json')) as Record<string, unknown>,
      };
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  }
  return null;
}
