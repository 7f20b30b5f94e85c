// Turns the conductor's `configdrive` value into a checked image in memory, before any disk is touched:
// a URL is downloaded; text is base64 of a gzip-compressed (or plain) ISO9660/VFAT image labelled config-2.
import { Inflate } from 'pako';
import type { AgentServices } from '../services.ts';
import { ConfigDriveError } from '../errors.ts';
import { downloadConfigDrive } from './fetch.ts';
import { shownUrl } from '../image/url-credentials.ts';
import { CONFIG_DRIVE_LABEL, identifyDrive, isConfigDriveLabel, isGzip, type DriveFormat } from './format.ts';

export const MAX_CONFIG_DRIVE_BYTES = 64 * 1024 * 1024;

export interface ConfigDriveImage {
  bytes: Buffer;
  format: DriveFormat;
  label: string;
  /** The filesystem's sector size; a disk with larger logical sectors cannot mount it as is. */
  sectorSize: number;
  /** Where it came from, for messages: the URL, or `inline`. */
  source: string;
}

const URL_LIKE = /^[a-z][a-z0-9+.-]*:\/\//i;
const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

function tooLarge(source: string): ConfigDriveError {
  return new ConfigDriveError(`Config drive size exceeds maximum limit of 64MiB (from ${source})`);
}

function decodeBase64(text: string, source: string): Buffer {
  const compact = text.replace(/\s+/g, '');
  if (compact === '' || !BASE64.test(compact) || compact.length % 4 === 1) {
    throw new ConfigDriveError(`Config drive from ${source} is not base64 encoded or the content is malformed`);
  }
  return Buffer.from(compact, 'base64');
}

function gunzip(data: Buffer, source: string): Buffer {
  const chunks: Uint8Array[] = [];
  let total = 0;
  const inflate = new Inflate();
  inflate.onData = (chunk: Uint8Array) => {
    total += chunk.length;
    if (total > MAX_CONFIG_DRIVE_BYTES) throw tooLarge(source);
    chunks.push(chunk);
  };
  let ok: boolean;
  try {
    ok = inflate.push(data, true);
  } catch (err) {
    if (err instanceof ConfigDriveError) throw err;
    throw new ConfigDriveError(
      `Encountered error while decompressing the config drive from ${source}: ${(err as Error).message}`,
    );
  }
  if (!ok || inflate.err) {
    const why = inflate.msg || 'the gzip stream ends early';
    throw new ConfigDriveError(`Encountered error while decompressing the config drive from ${source}: ${why}`);
  }
  return Buffer.concat(chunks);
}

/** Decoded payload → image bytes: gunzipped when gzip, else taken as a plain image. */
function unwrap(data: Buffer, source: string): Buffer {
  const bytes = isGzip(data) ? gunzip(data, source) : data;
  if (bytes.length > MAX_CONFIG_DRIVE_BYTES) throw tooLarge(source);
  return bytes;
}

function check(bytes: Buffer, source: string): ConfigDriveImage {
  const id = identifyDrive(bytes);
  if (!id) throw new ConfigDriveError(`Config drive from ${source} is neither an ISO9660 nor a VFAT image`);
  if (!isConfigDriveLabel(id.label)) {
    throw new ConfigDriveError(
      `Config drive from ${source} is a ${id.format} image labelled "${id.label}", not "${CONFIG_DRIVE_LABEL}"`,
    );
  }
  return { bytes, format: id.format, label: id.label, sectorSize: id.sectorSize, source };
}

/**
 * Decodes and checks a config drive value; touches no disk. A URL body may be the image itself, gzip of
 * it, or the base64 text (what ironic stores in Swift). Every failure is a ConfigDriveError saying why.
 */
export async function prepareConfigDrive(
  services: Pick<AgentServices, 'config' | 'log' | 'clock'>,
  value: string,
  signal?: AbortSignal,
): Promise<ConfigDriveImage> {
  const text = value.trim();
  if (text === '') throw new ConfigDriveError('Config drive is an empty string');
  if (URL_LIKE.test(text)) {
    const source = shownUrl(text);
    if (!/^https?:\/\//i.test(text)) throw new ConfigDriveError(`Config drive URL '${source}' is not http or https`);
    // Base64 of a 64 MiB payload is 4/3 as long; anything longer cannot decode to an acceptable drive.
    const body = await downloadConfigDrive(services, text, Math.ceil((MAX_CONFIG_DRIVE_BYTES * 4) / 3) + 4096, signal);
    if (isGzip(body) || identifyDrive(body)) return check(unwrap(body, source), source);
    return check(unwrap(decodeBase64(body.toString('latin1'), source), source), source);
  }
  return check(unwrap(decodeBase64(text, 'inline value'), 'inline value'), 'inline value');
}

export { writeConfigDrivePartition } from './partition.ts';
