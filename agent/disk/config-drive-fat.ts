// Rebuilds an ISO9660 config drive as a VFAT image labelled CONFIG-2 with the same files, for disks with
// 4 KiB logical sectors (ISO9660 cannot be mounted there). Files come out with xorriso and go in with
// mtools, so nothing is mounted.
import { chmod, mkdtemp, readdir, rm, writeFile, truncate, readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Logger } from '../log.ts';
import { ConfigDriveError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { ConfigDriveImage } from './config-drive.ts';

async function makeWritable(dir: string): Promise<void> {
  await chmod(dir, 0o755);
  for (const entry of await readdir(dir, { withFileTypes: true })) {
    if (entry.isDirectory()) await makeWritable(join(dir, entry.name));
  }
}

/** A VFAT image of `sizeBytes` with FAT sectors of `sectorSize`, holding the ISO's files. */
export async function rebuildAsVfat(drive: ConfigDriveImage, sizeBytes: number, sectorSize: number, log?: Logger): Promise<Buffer> {
  const work = await mkdtemp(join(tmpdir(), 'ina-configdrive-'));
  try {
    const iso = join(work, 'drive.iso');
    const tree = join(work, 'tree');
    const fat = join(work, 'drive.vfat');
    await writeFile(iso, drive.bytes);
    await run('xorriso', ['-osirrox', 'on', '-indev', iso, '-extract', '/', tree], { log });
    // xorriso restores ISO permissions (read-only directories), which would stop cleanup.
    await makeWritable(tree);
    await writeFile(fat, '');
    await truncate(fat, sizeBytes);
    await run('mkfs.vfat', ['-S', String(sectorSize), '-n', 'CONFIG-2', fat], { log });
    const entries = await readdir(tree);
    if (entries.length > 0) {
      const env = { MTOOLS_SKIP_CHECK: '1' };
      await run('mcopy', ['-s', '-p', '-i', fat, ...entries.map((e) => join(tree, e)), '::/'], { env, log });
    }
    return await readFile(fat);
  } catch (err) {
    throw new ConfigDriveError(`A failure occurred while re-creating the config drive as VFAT: ${errorText(err)}`);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}
