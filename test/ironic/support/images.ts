// The images the scenarios deploy: test/helpers/make-image.ts builds a small real GPT disk (ext4 root
// with a marker file) and its qcow2 disguises; here they get the names and checksums Ironic is given.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { basename, join } from 'node:path';
import {
  compress,
  makeDiskImage,
  qcow2WithBackingFile as backed,
  toQcow2 as convert,
  type Packing,
} from '../../helpers/make-image.ts';

/** Where make-image.ts puts the marker file in the root filesystem. */
export const MARKER_PATH = '/ina-marker.txt';
const SIZE_MIB = 24;

export interface BuiltImage {
  name: string;
  file: string;
  marker: string;
  sha256: string;
  md5: string;
  /** Byte range of the ext4 root partition inside the raw image. */
  root: { start: number; end: number };
}

async function describe(file: string, marker: string, root: BuiltImage['root']): Promise<BuiltImage> {
  const data = await readFile(file);
  return {
    name: basename(file),
    file,
    marker,
    sha256: createHash('sha256').update(data).digest('hex'),
    md5: createHash('md5').update(data).digest('hex'),
    root,
  };
}

/** A raw GPT disk image whose ext4 root carries a unique marker file. */
export async function buildRawImage(dir: string, name: string): Promise<BuiltImage> {
  const img = await makeDiskImage(dir, { sizeMiB: SIZE_MIB, table: 'gpt', name });
  return describe(img.path, img.marker, img.partition);
}

export async function toQcow2(dir: string, raw: BuiltImage, name: string): Promise<BuiltImage> {
  return describe(await convert(raw.file, join(dir, name)), raw.marker, raw.root);
}

/** The raw image compressed (`disk.raw.gz`, `disk.raw.zst`): the agent decodes it on the way to the disk. */
export async function compressed(raw: BuiltImage, kind: Packing): Promise<BuiltImage> {
  return describe(await compress(raw.file, kind), raw.marker, raw.root);
}

/** A qcow2 overlay whose backing file is `raw`: an image the agent must refuse to write. */
export async function qcow2WithBackingFile(dir: string, raw: BuiltImage, name: string): Promise<BuiltImage> {
  return describe(await backed(raw.file, join(dir, name)), raw.marker, raw.root);
}
