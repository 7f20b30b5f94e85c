// Small, real whole-disk images for tests and the demo: a GPT or MBR partition table with one ext4
// partition holding a marker file and some random data, built in files (no mounting, no loop devices).
// Also the usual disguises of such an image: qcow2 (plain, with a backing file, with a data file) and
// gzip/zstd/xz compression.
import { randomBytes } from 'node:crypto';
import { mkdtemp, mkdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';

const MiB = 1024 * 1024;

export interface DiskImage {
  path: string;
  sizeBytes: number;
  table: 'gpt' | 'mbr';
  marker: string;
  /** Byte range of the ext4 partition inside the image. */
  partition: { start: number; end: number };
  /** With `esp`: the EFI system partition's byte range (partition 1; the ext4 one is then partition 2). */
  esp?: { start: number; end: number };
}

/** An EFI system partition for a GPT image: its size, FAT label and serial (`ABCD1234`), and files by path. */
export interface EspSpec {
  sizeMiB: number;
  label: string;
  serial: string;
  files: Record<string, string>;
}

export async function workDir(prefix = 'ina-img-'): Promise<{ dir: string; cleanup(): Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  return { dir, cleanup: () => rm(dir, { recursive: true, force: true }) };
}

/** A `sizeMiB` whole-disk image: the partition spans 1 MiB .. size-1 MiB, the marker file is `/ina-marker.txt`. */
export async function makeDiskImage(
  dir: string,
  opts: { sizeMiB?: number; table?: 'gpt' | 'mbr'; name?: string; randomKiB?: number; esp?: EspSpec } = {},
): Promise<DiskImage> {
  const sizeMiB = opts.sizeMiB ?? 8;
  const table = opts.table ?? 'gpt';
  const name = opts.name ?? `disk-${table}.raw`;
  const marker = `ina-marker ${randomBytes(8).toString('hex')}`;
  const content = join(dir, `${name}.content`);
  await mkdir(content, { recursive: true });
  await writeFile(join(content, 'ina-marker.txt'), `${marker}\n`);
  await writeFile(join(content, 'random.bin'), randomBytes((opts.randomKiB ?? Math.min(1024, sizeMiB * 128)) * 1024));

  const espMiB = opts.esp?.sizeMiB ?? 0;
  if (opts.esp && table !== 'gpt') throw new Error('makeDiskImage: an ESP only on GPT');
  const partMiB = sizeMiB - 2 - espMiB;
  const fs = join(dir, `${name}.ext4`);
  await execa('truncate', ['-s', `${partMiB}M`, fs]);
  await execa('mkfs.ext4', ['-q', '-F', '-L', 'inaroot', '-d', content, fs]);

  const path = join(dir, name);
  await execa('truncate', ['-s', `${sizeMiB}M`, path]);
  const startSector = 2048 + (espMiB * MiB) / 512;
  const endSector = startSector + (partMiB * MiB) / 512 - 1;
  if (opts.esp) {
    await makeEsp(dir, path, opts.esp);
    await execa('sgdisk', ['-n', `2:${startSector}:${endSector}`, '-t', '2:8300', '-c', '2:root', path]);
  } else if (table === 'gpt') {
    await execa('sgdisk', ['-n', `1:${startSector}:${endSector}`, '-t', '1:8300', '-c', '1:root', path]);
  } else {
    await execa('parted', [
      '-s',
      path,
      'mklabel',
      'msdos',
      'mkpart',
      'primary',
      'ext4',
      `${startSector}s`,
      `${endSector}s`,
    ]);
  }
  await execa('dd', [`if=${fs}`, `of=${path}`, 'bs=1M', `seek=${1 + espMiB}`, 'conv=notrunc', 'status=none']);
  await rm(fs);
  await rm(content, { recursive: true });
  return {
    path,
    sizeBytes: sizeMiB * MiB,
    table,
    marker,
    partition: { start: startSector * 512, end: (endSector + 1) * 512 },
    ...(opts.esp ? { esp: { start: MiB, end: (1 + espMiB) * MiB } } : {}),
  };
}

/** Partition 1 of the GPT image `path`: an ESP from 1 MiB, a FAT with the spec's label, serial and files (mtools). */
async function makeEsp(dir: string, path: string, esp: EspSpec): Promise<void> {
  const fat = join(dir, `${esp.label}.fat`);
  await execa('truncate', ['-s', `${esp.sizeMiB}M`, fat]);
  await execa('mkfs.vfat', ['-n', esp.label, '-i', esp.serial, fat]);
  const env = { MTOOLS_SKIP_CHECK: '1' };
  for (const [file, text] of Object.entries(esp.files)) {
    const parts = file.split('/');
    for (let i = 1; i < parts.length; i++) {
      await execa('mmd', ['-D', 's', '-i', fat, `::/${parts.slice(0, i).join('/')}`], { env, reject: false });
    }
    await execa('mcopy', ['-i', fat, '-', `::/${file}`], { env, input: text });
  }
  await execa('sgdisk', ['-n', `1:2048:+${esp.sizeMiB}M`, '-t', '1:ef00', '-c', '1:EFI', path]);
  await execa('dd', [`if=${fat}`, `of=${path}`, 'bs=1M', 'seek=1', 'conv=notrunc', 'status=none']);
  await rm(fat);
}

/**
 * An MBR label on `target` (an image file or a device) with four primary partitions between the five `boundsMiB`:
 * no slot is left for a config drive partition, whatever room the disk has.
 */
export async function fourMbrPrimaries(target: string, boundsMiB: readonly [number, number, number, number, number]) {
  const part = (i: number) => ['mkpart', 'primary', 'ext4', `${boundsMiB[i]}MiB`, `${boundsMiB[i + 1]}MiB`];
  await execa('parted', ['-s', target, 'mklabel', 'msdos', ...part(0), ...part(1), ...part(2), ...part(3)]);
}

export async function toQcow2(raw: string, out = `${raw}.qcow2`): Promise<string> {
  await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'qcow2', raw, out]);
  return out;
}

/** A qcow2 overlay whose data lives in `raw` (a backing file reference). */
export async function qcow2WithBackingFile(raw: string, out = `${raw}.backed.qcow2`): Promise<string> {
  await execa('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', raw, '-F', 'raw', out]);
  return out;
}

/** A qcow2 whose data lives in an external raw data file. */
export async function qcow2WithDataFile(dir: string, sizeMiB = 8): Promise<string> {
  const out = join(dir, 'datafile.qcow2');
  await execa('qemu-img', [
    'create',
    '-q',
    '-f',
    'qcow2',
    '-o',
    `data_file=${join(dir, 'datafile.raw')},data_file_raw=on`,
    out,
    `${sizeMiB}M`,
  ]);
  return out;
}

export type Packing = 'gzip' | 'zstd' | 'xz';

/** Each tool's arguments for a fast compression to stdout. */
const PACK_ARGS: Record<Packing, string[]> = { gzip: ['-c', '-1'], zstd: ['-q', '-c', '-1'], xz: ['-c', '-0', '-T0'] };
const SUFFIX: Record<Packing, string> = { gzip: 'gz', zstd: 'zst', xz: 'xz' };

/** The file compressed next to itself (`<path>.gz` and so on); returns the new file's path. */
export async function compress(path: string, kind: Packing): Promise<string> {
  const out = `${path}.${SUFFIX[kind]}`;
  await execa('sh', ['-c', '"$0" "$@" > "$OUT"', kind, ...PACK_ARGS[kind], path], { env: { OUT: out } });
  return out;
}

/** The bytes compressed, in memory. */
export async function pack(kind: Packing, data: Buffer): Promise<Buffer> {
  const { stdout } = await execa(kind, PACK_ARGS[kind], { input: data, encoding: 'buffer' });
  return Buffer.from(stdout);
}
