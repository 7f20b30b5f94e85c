// Small real whole-disk images: GPT with one ext4 root partition holding a marker file, built on plain
// files (sgdisk, mkfs.ext4 -d; nothing is mounted), plus the qcow2 variants the scenarios need.
import { createHash, randomUUID } from 'node:crypto';
import { mkdir, open, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';

const MiB = 1024 * 1024;
export const IMAGE_SIZE = 24 * MiB;
/** The root partition spans [1 MiB, 21 MiB): past it the image holds only the backup GPT. */
export const ROOT_START = 1 * MiB;
export const ROOT_SIZE = 20 * MiB;
export const MARKER_PATH = '/etc/ina-marker';

export interface BuiltImage {
  name: string;
  file: string;
  marker: string;
  sha256: string;
  md5: string;
  size: number;
}

async function digest(file: string, algo: 'sha256' | 'md5'): Promise<string> {
  return createHash(algo).update(await readFile(file)).digest('hex');
}

async function describe(dir: string, name: string, marker: string): Promise<BuiltImage> {
  const file = join(dir, name);
  return { name, file, marker, sha256: await digest(file, 'sha256'), md5: await digest(file, 'md5'), size: (await stat(file)).size };
}

/** A raw GPT disk image whose ext4 root carries a unique marker file. */
export async function buildRawImage(dir: string, name: string): Promise<BuiltImage> {
  const marker = `ina-conformance ${randomUUID()}`;
  const tree = join(dir, `${name}.tree`);
  await mkdir(join(tree, 'etc'), { recursive: true });
  await writeFile(join(tree, MARKER_PATH), `${marker}\n`);
  const fs = join(dir, `${name}.rootfs`);
  await execa('mkfs.ext4', ['-q', '-F', '-L', 'root', '-d', tree, fs, `${ROOT_SIZE / 1024}k`]);
  const file = join(dir, name);
  await execa('truncate', ['-s', String(IMAGE_SIZE), file]);
  await execa('sgdisk', ['-o', '-n', `1:${ROOT_START / 512}:+${ROOT_SIZE / 1024}K`, '-t', '1:8300', '-c', '1:root', file]);
  const out = await open(file, 'r+');
  try {
    await out.write(await readFile(fs), 0, ROOT_SIZE, ROOT_START);
  } finally {
    await out.close();
  }
  await rm(tree, { recursive: true, force: true });
  await rm(fs, { force: true });
  return describe(dir, name, marker);
}

export async function toQcow2(dir: string, raw: BuiltImage, name: string): Promise<BuiltImage> {
  await execa('qemu-img', ['convert', '-f', 'raw', '-O', 'qcow2', raw.file, join(dir, name)]);
  return describe(dir, name, raw.marker);
}

/** A qcow2 overlay whose backing file is `raw`: an image the agent must refuse to write. */
export async function qcow2WithBackingFile(dir: string, raw: BuiltImage, name: string): Promise<BuiltImage> {
  await execa('qemu-img', ['create', '-q', '-f', 'qcow2', '-b', raw.file, '-F', 'raw', join(dir, name)]);
  return describe(dir, name, raw.marker);
}
