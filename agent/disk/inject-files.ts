// The `inject_files` deploy step: files written into (or deleted from) partitions of the root disk after the
// image is on it. A file names its partition by number, by device path (including /dev/disk/by-partuuid/,
// by-partlabel/, by-uuid/ and by-label/ names, resolved with blkid because the ramdisk has no udev), or not at
// all: then the first partition whose filesystem holds the path's first component is used, as IPA does.
// The image is untrusted: paths never leave the mounted partition, through `..` or through a symlink.
// Content is base64, or, as in IPA, a URL (it contains `://`), with `{node[...]}` fields filled from the node,
// fetched with the image download's client and bounds before any partition is touched.
import { lstat, chmod, chown, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { AgentServices } from '../services.ts';
import { isObject } from '../parse.ts';
import {
  CommandExecutionError,
  DeviceNotFound,
  errorText,
  InvalidCommandParamsError,
  ProtectedDeviceError,
} from '../errors.ts';
import { confinedPath } from '../host/confined-path.ts';
import { withMounted } from '../host/mounts.ts';
import { Dispatchers } from '../image/dispatchers.ts';
import { readBounded } from '../image/http.ts';
import { Transfer } from '../image/transfer.ts';
import { shownUrl } from '../image/url-credentials.ts';
import { listPartitions, type Partition } from './partitions.ts';
import { chooseRootDevice } from './root-device.ts';

export interface InjectFile {
  path: string;
  partition?: number | string;
  /** Decoded content; absent when `deleted` or given by URL. */
  content?: Buffer;
  /** Where the content is fetched from (IPA: content containing `://`), with `{node[…]}` fields unfilled. */
  contentUrl?: string;
  deleted: boolean;
  mode?: number;
  dirmode?: number;
  owner?: number;
  group?: number;
}

const FIELDS = new Set(['path', 'partition', 'content', 'deleted', 'mode', 'dirmode', 'owner', 'group']);
const BY_NAME = /^\/dev\/disk\/by-(partuuid|partlabel|uuid|label)\/(.+)$/;

function invalid(why: string): never {
  throw new InvalidCommandParamsError(`Validation of files failed: ${why}`);
}

function intField(item: Record<string, unknown>, key: string, i: number, max: number): number | undefined {
  const v = item[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0 || v > max)
    invalid(`files[${i}].${key} must be an integer from 0 to ${max}, got ${JSON.stringify(v)}`);
  return v;
}

/** Parses one list of file specs (the node's `inject_files` property or the step's `files`); nothing is touched. */
export function parseInjectFiles(files: unknown): InjectFile[] {
  if (files === undefined || files === null) return [];
  if (!Array.isArray(files)) invalid(`files must be a list, got ${JSON.stringify(files)}`);
  return files.map((item: unknown, i): InjectFile => {
    if (!isObject(item)) invalid(`files[${i}] must be an object, got ${JSON.stringify(item)}`);
    const unknown = Object.keys(item).filter((k) => !FIELDS.has(k));
    if (unknown.length > 0) invalid(`files[${i}] has unexpected fields ${unknown.join(', ')}`);
    const { path, partition, content, deleted } = item;
    if (typeof path !== 'string' || path === '') invalid(`files[${i}].path is required and must be a string`);
    if (!path.startsWith('/') || path.split('/').includes('..') || path.replace(/\/+/g, '/') === '/') {
      invalid(`files[${i}].path must be an absolute path to a file without '..', got ${JSON.stringify(path)}`);
    }
    if (partition !== undefined && partition !== null) {
      const okNumber = typeof partition === 'number' && Number.isInteger(partition) && partition >= 1;
      const okPath = typeof partition === 'string' && partition.startsWith('/dev/');
      if (!okNumber && !okPath)
        invalid(
          `files[${i}].partition must be a partition number (from 1) or a /dev path, got ${JSON.stringify(partition)}`,
        );
    }
    if (deleted !== undefined && deleted !== null && typeof deleted !== 'boolean')
      invalid(`files[${i}].deleted must be a boolean`);
    let data: Buffer | undefined;
    let contentUrl: string | undefined;
    if (content !== undefined && content !== null) {
      if (deleted === true) invalid(`files[${i}]: content and deleted cannot both be set`);
      if (typeof content !== 'string') invalid(`files[${i}].content must be a base64 string`);
      if (content.includes('://')) {
        if (!/^https?:\/\//i.test(content)) invalid(`files[${i}].content: only http(s) URLs can be fetched`);
        contentUrl = content;
      } else {
        const compact = content.replace(/\s+/g, '');
        if (!/^[A-Za-z0-9+/]*={0,2}$/.test(compact) || compact.length % 4 !== 0)
          invalid(`files[${i}].content is not valid base64`);
        data = Buffer.from(compact, 'base64');
      }
    } else if (deleted !== true) {
      invalid(`files[${i}]: either content or deleted must be given`);
    }
    return {
      path,
      ...(partition !== undefined && partition !== null ? { partition: partition as number | string } : {}),
      ...(data ? { content: data } : {}),
      ...(contentUrl ? { contentUrl } : {}),
      deleted: deleted === true,
      mode: intField(item, 'mode', i, 0o7777),
      dirmode: intField(item, 'dirmode', i, 0o7777),
      owner: intField(item, 'owner', i, 2 ** 32 - 2),
      group: intField(item, 'group', i, 2 ** 32 - 2),
    };
  });
}

/** The step's argument `verify_ca`: whether fetching URL content checks the server's certificate. */
export function parseVerifyCa(v: unknown): boolean {
  if (v === undefined || v === null) return true;
  if (typeof v !== 'boolean')
    throw new InvalidCommandParamsError(`verify_ca must be a boolean, got ${JSON.stringify(v)}`);
  return v;
}

/**
 * Python's `str.format(node=node)` as IPA applies it to a content URL, for the fields that make sense in a URL:
 * `{node[key]}` (nested keys and list indexes allowed) giving a string or number, and `{{`/`}}`. Anything else
 * is refused rather than sent as written.
 */
export function formatContentUrl(url: string, node: Record<string, unknown> | undefined, i: number): string {
  return url.replace(/\{\{|\}\}|\{([^{}]*)\}/g, (whole, field: string | undefined) => {
    if (whole === '{{') return '{';
    if (whole === '}}') return '}';
    const m = /^node((?:\[[^\]]+\])+)$/.exec(field!);
    if (!m) invalid(`files[${i}].content: the URL field {${field}} is not supported (use {node[key]})`);
    let v: unknown = node;
    for (const [, key] of m[1]!.matchAll(/\[([^\]]+)\]/g))
      v = Array.isArray(v) && /^\d+$/.test(key!) ? v[Number(key)] : isObject(v) ? v[key!] : undefined;
    if (typeof v !== 'string' && typeof v !== 'number')
      invalid(`files[${i}].content: the node has no value for {${field}} in the URL`);
    return encodeURIComponent(String(v));
  });
}

/** The largest content fetched for one file: injected files are configuration, not images. */
export const MAX_CONTENT_BYTES = 16 * 1024 * 1024;

export interface ContentSource {
  verifyCa: boolean;
  /** The node the step runs for: fills `{node[…]}` in content URLs. */
  node?: Record<string, unknown>;
  signal?: AbortSignal;
}

/** Fetches the content of every file given by URL, with the image download's client, TLS settings and retries. */
async function fetchContents(services: AgentServices, files: InjectFile[], source: ContentSource): Promise<void> {
  if (!files.some((f) => f.contentUrl)) return;
  const { image, tls } = services.config;
  const dispatchers = new Dispatchers({
    connectTimeoutMs: image.connectTimeoutS * 1000,
    stallTimeoutMs: image.connectTimeoutS * 1000,
    insecure: tls.insecure || !source.verifyCa,
    caFile: tls.caFile,
    minTlsVersion: tls.minVersion,
    proxies: {},
  });
  try {
    for (const [i, f] of files.entries()) {
      if (!f.contentUrl) continue;
      const url = formatContentUrl(f.contentUrl, source.node, i);
      const transfer = new Transfer(dispatchers, {
        retries: image.retries,
        retryIntervalMs: image.retryIntervalS * 1000,
        maxDurationMs: image.maxDurationS * 1000,
        log: services.log,
        clock: services.clock,
        cancel: source.signal,
      });
      const tooLong = () =>
        new CommandExecutionError(
          `The content of ${f.path} at ${shownUrl(url)} is larger than ${MAX_CONTENT_BYTES} bytes`,
        );
      try {
        const opened = await transfer.open([url], `Content of ${f.path}`);
        f.content = await readBounded(opened.body, opened.cancel, MAX_CONTENT_BYTES, tooLong);
      } catch (err) {
        if (err instanceof CommandExecutionError) throw err;
        throw new CommandExecutionError(
          `Cannot fetch the content of ${f.path} from ${shownUrl(url)}: ${errorText(err)}`,
        );
      }
    }
  } finally {
    await dispatchers.close();
  }
}

function findBySpec(parts: Partition[], spec: number | string, disk: string): Partition {
  const m = typeof spec === 'string' ? BY_NAME.exec(spec) : null;
  const found =
    typeof spec === 'number'
      ? parts.find((p) => p.number === spec)
      : m
        ? parts.find(
            (p) =>
              ({ partuuid: p.partuuid, partlabel: p.partLabel, uuid: p.uuid, label: p.label })[
                m[1] as 'uuid'
              ]?.toLowerCase() === m[2]!.toLowerCase(),
          )
        : parts.find((p) => p.path === spec);
  if (!found) {
    throw new DeviceNotFound(
      `No partition ${JSON.stringify(spec)} on the root device ${disk}; its partitions: ${parts.map((p) => p.path).join(', ') || 'none'}`,
    );
  }
  return found;
}

async function applyOne(root: string, f: InjectFile): Promise<void> {
  const target = await confinedPath(root, f.path, {
    ...(f.dirmode !== undefined ? { makeDirs: { mode: f.dirmode } } : { makeDirs: {} }),
    refuse: (why) => new InvalidCommandParamsError(`Validation of files failed: ${why}`),
  });
  if (f.deleted) {
    await rm(target, { force: true });
    return;
  }
  await writeFile(target, f.content!, f.mode !== undefined ? { mode: f.mode } : {});
  if (f.mode !== undefined) await chmod(target, f.mode);
  if (f.owner !== undefined || f.group !== undefined) await chown(target, f.owner ?? -1, f.group ?? -1);
}

/** Applies the files to the root disk's partitions; returns what went where for the log. */
export async function injectFiles(
  services: AgentServices,
  files: InjectFile[],
  hints?: Record<string, unknown>,
  source: ContentSource = { verifyCa: true },
): Promise<string[]> {
  if (files.length === 0) return [];
  // Every URL is fetched before a partition is mounted: a content that cannot be had changes nothing.
  await fetchContents(services, files, source);
  const disk = await chooseRootDevice(services, hints);
  const verdict = await services.guard.verdict(disk.path);
  if (!verdict.ok) throw new ProtectedDeviceError(`Refusing to inject files into ${disk.path}: ${verdict.reason}`);
  const parts = await listPartitions(disk.path, services.log);
  const done: string[] = [];
  for (const f of files) {
    let part: Partition | undefined;
    if (f.partition !== undefined) part = findBySpec(parts, f.partition, disk.path);
    else {
      const first = f.path.split('/').filter((c) => c !== '')[0]!;
      const top = f.path.split('/').filter((c) => c !== '').length === 1 ? '' : first;
      for (const p of parts.filter((x) => x.fstype && x.fstype !== 'swap')) {
        const has = await withMounted(
          p.path,
          async (root) =>
            top === '' ||
            (await lstat(join(root, top)).then(
              () => true,
              () => false,
            )),
          { log: services.log, prefix: 'ina-inject-' },
        );
        if (has) {
          part = p;
          break;
        }
      }
      if (!part)
        throw new DeviceNotFound(
          `No partition of ${disk.path} holds ${top === '' ? 'a filesystem' : `/${top}`} for ${f.path}`,
        );
    }
    await withMounted(part.path, (root) => applyOne(root, f), { log: services.log, prefix: 'ina-inject-' });
    done.push(`${f.deleted ? 'deleted' : 'wrote'} ${f.path} on ${part.path}`);
  }
  services.log.info({ files: done }, 'files injected');
  return done;
}
