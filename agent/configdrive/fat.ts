// Rebuilds a config drive as a VFAT image labelled CONFIG-2 with the same files and FAT sectors as large
// as the disk's, for disks with 4 KiB logical sectors (ISO9660, or FAT with 512-byte sectors, cannot be
// mounted there). Files come out of an ISO in memory (iso9660.ts) or out of a FAT image with mtools, and
// go in with mtools, so nothing is mounted and no ISO tool is needed.
import { mkdir, readdir, writeFile, truncate, readFile } from 'node:fs/promises';
import { withTempDir } from '../host/temp-dir.ts';
import { dirname, join } from 'node:path';
import type { Logger } from '../log.ts';
import { ConfigDriveError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { ConfigDriveImage } from './prepare.ts';
import { readIsoFiles } from './iso9660.ts';

const MTOOLS_ENV = { MTOOLS_SKIP_CHECK: '1' };

async function extractTree(drive: ConfigDriveImage, work: string, tree: string, log?: Logger): Promise<void> {
  await mkdir(tree);
  if (drive.format === 'iso9660') {
    for (const file of readIsoFiles(drive.bytes)) {
      await mkdir(dirname(join(tree, file.path)), { recursive: true });
      await writeFile(join(tree, file.path), file.data);
    }
    return;
  }
  const image = join(work, 'drive.src');
  await writeFile(image, drive.bytes);
  // mcopy exits 1 for any failure, a wildcard that matches nothing included, so an empty drive is asked first.
  const listing = await run('mdir', ['-b', '-i', image, '::/'], { env: MTOOLS_ENV, log });
  if (listing.stdout.trim() === '') return;
  await run('mcopy', ['-s', '-n', '-p', '-i', image, '::/*', tree], { env: MTOOLS_ENV, log });
}

/** A VFAT image of `sizeBytes` with FAT sectors of `sectorSize`, holding the drive's files. */
export async function rebuildAsVfat(
  drive: ConfigDriveImage,
  sizeBytes: number,
  sectorSize: number,
  log?: Logger,
): Promise<Buffer> {
  try {
    return await withTempDir('ina-configdrive-', async (work) => {
      const tree = join(work, 'tree');
      const fat = join(work, 'drive.vfat');
      await extractTree(drive, work, tree, log);
      await writeFile(fat, '');
      await truncate(fat, sizeBytes);
      await run('mkfs.vfat', ['-S', String(sectorSize), '-n', 'CONFIG-2', fat], { log });
      const entries = await readdir(tree);
      if (entries.length > 0) {
        await run('mcopy', ['-s', '-p', '-i', fat, ...entries.map((e) => join(tree, e)), '::/'], {
          env: MTOOLS_ENV,
          log,
        });
      }
      return await readFile(fat);
    });
  } catch (err) {
    throw new ConfigDriveError(`A failure occurred while re-creating the config drive as VFAT: ${errorText(err)}`);
  }
}
