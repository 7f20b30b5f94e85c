// A real OCI registry for the `oci://` scenario: Debian's `docker-registry` (CNCF distribution 2.8) on a free
// loopback port, TLS with the test's CA, htpasswd (Basic) auth, filesystem storage in the scenario's
// directory; started here and stopped by PID. Artifacts are pushed with the distribution API itself
// (upload a blob, then PUT a manifest or an index), as `oras push` or `skopeo copy` would.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import { readFile, writeFile } from 'node:fs/promises';
import type { IncomingHttpHeaders } from 'node:http';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { join } from 'node:path';
import { execa } from 'execa';
import { inject } from 'vitest';
import { freePort } from './agent-process.ts';
import { noteStarted } from './leftovers.ts';
import type { TestCa } from './test-ca.ts';

export const MEDIA = {
  manifest: 'application/vnd.oci.image.manifest.v1+json',
  index: 'application/vnd.oci.image.index.v1+json',
  empty: 'application/vnd.oci.empty.v1+json',
} as const;

/** The artifact type a disk image is pushed with (what Metal3's tooling uses). */
export const DISK_ARTIFACT = 'application/vnd.unknown.artifact.v1';

export interface Descriptor {
  mediaType: string;
  digest: string;
  size: number;
  annotations?: Record<string, string>;
  platform?: { architecture: string; os: string };
  artifactType?: string;
}

export interface HttpReply {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
}

/** One HTTPS request with the test CA; the whole reply read. */
export function tlsRequest(
  ca: string,
  method: string,
  url: string,
  headers: Record<string, string> = {},
  body?: Buffer,
): Promise<HttpReply> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { method, headers, agent: new HttpsAgent({ ca, keepAlive: false }) }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (c: Buffer) => chunks.push(c));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

export interface Registry {
  /** `127.0.0.1:PORT`: what an `oci://` URL names. */
  host: string;
  port: number;
  user: string;
  password: string;
  /** The Authorization value the registry accepts (what Ironic hands the agent). */
  authorization: string;
  /** Uploads `data` as a blob of `repo`; returns its descriptor. */
  pushBlob(repo: string, data: Buffer, mediaType: string, annotations?: Record<string, string>): Promise<Descriptor>;
  /** PUTs a manifest or an index under a tag or its digest; returns the digest the registry computed. */
  pushManifest(repo: string, ref: string, doc: object, mediaType: string): Promise<Descriptor>;
  /** A single-layer disk-image artifact (empty config), tagged `tag`; returns the manifest's descriptor. */
  pushDiskArtifact(repo: string, tag: string, layer: Descriptor, disktype?: string): Promise<Descriptor>;
  deleteBlob(repo: string, digest: string): Promise<void>;
  /** Where the filesystem driver keeps a blob's bytes (to damage them, as bit rot would). */
  blobDataPath(digest: string): string;
  stop(): Promise<void>;
}

export function sha256Digest(data: Buffer): string {
  return `sha256:${createHash('sha256').update(data).digest('hex')}`;
}

async function waitUntilUp(ca: string, url: string, child: ChildProcess, logFile: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  let last = '';
  for (;;) {
    if (child.exitCode !== null) break;
    try {
      const r = await tlsRequest(ca, 'GET', url);
      if (r.status === 401) return;
      last = `status ${r.status}`;
    } catch (err) {
      last = (err as Error).message;
    }
    if (Date.now() > deadline) break;
    await new Promise((r) => setTimeout(r, 200));
  }
  const log = await readFile(logFile, 'utf8').catch(() => '');
  throw new Error(`docker-registry did not come up (${last}):\n${log.split('\n').slice(-15).join('\n')}`);
}

export async function startRegistry(dir: string, tls: TestCa): Promise<Registry> {
  const ca = await readFile(tls.caFile, 'utf8');
  const port = await freePort();
  const host = `127.0.0.1:${port}`;
  const user = 'ina-puller';
  const password = randomBytes(12).toString('hex');
  const htpasswd = join(dir, 'registry.htpasswd');
  const { stdout } = await execa('htpasswd', ['-nbB', user, password]);
  await writeFile(htpasswd, `${stdout.trim()}\n`);
  const storage = join(dir, 'registry-storage');
  const config = join(dir, 'registry.yml');
  // JSON is YAML: the config needs no YAML writer
  await writeFile(
    config,
    JSON.stringify({
      version: 0.1,
      log: { level: 'info', accesslog: { disabled: false } },
      storage: { filesystem: { rootdirectory: storage }, delete: { enabled: true } },
      http: {
        addr: host,
        secret: randomBytes(16).toString('hex'),
        tls: { certificate: tls.certFile, key: tls.keyFile },
      },
      auth: { htpasswd: { realm: 'ina-registry', path: htpasswd } },
    }),
  );
  const logFile = join(dir, 'registry.log');
  const fd = openSync(logFile, 'a');
  const child = spawn('docker-registry', ['serve', config], { detached: true, stdio: ['ignore', fd, fd] });
  closeSync(fd);
  if (child.pid !== undefined) noteStarted(inject('leftoversFile'), { kind: 'registry', pid: child.pid, config });
  const signal = (sig: NodeJS.Signals) => {
    try {
      if (child.pid !== undefined) process.kill(-child.pid, sig);
    } catch {
      // already gone
    }
  };
  const stop = async () => {
    if (child.exitCode !== null || child.signalCode !== null) return;
    const gone = new Promise((r) => child.once('exit', r));
    signal('SIGTERM');
    const timer = setTimeout(() => signal('SIGKILL'), 5000);
    await gone;
    clearTimeout(timer);
  };
  const base = `https://${host}`;
  try {
    await waitUntilUp(ca, `${base}/v2/`, child, logFile);
  } catch (err) {
    await stop();
    throw err;
  }
  const authorization = `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  const call = async (
    method: string,
    url: string,
    headers: Record<string, string>,
    body: Buffer | undefined,
    want: number,
  ) => {
    const r = await tlsRequest(ca, method, new URL(url, base).toString(), { authorization, ...headers }, body);
    if (r.status !== want) throw new Error(`registry ${method} ${url}: ${r.status} ${r.body.toString().slice(0, 300)}`);
    return r;
  };
  const pushManifest: Registry['pushManifest'] = async (repo, ref, doc, mediaType) => {
    const body = Buffer.from(JSON.stringify(doc));
    const r = await call('PUT', `/v2/${repo}/manifests/${ref}`, { 'content-type': mediaType }, body, 201);
    const digest = sha256Digest(body);
    if (r.headers['docker-content-digest'] !== digest)
      throw new Error(`registry computed ${r.headers['docker-content-digest']} for a manifest of digest ${digest}`);
    return { mediaType, digest, size: body.length };
  };
  const pushBlob: Registry['pushBlob'] = async (repo, data, mediaType, annotations) => {
    const digest = sha256Digest(data);
    const started = await call('POST', `/v2/${repo}/blobs/uploads/`, {}, undefined, 202);
    const location = String(started.headers.location);
    const sep = location.includes('?') ? '&' : '?';
    await call(
      'PUT',
      `${location}${sep}digest=${encodeURIComponent(digest)}`,
      { 'content-type': 'application/octet-stream', 'content-length': String(data.length) },
      data,
      201,
    );
    return { mediaType, digest, size: data.length, ...(annotations ? { annotations } : {}) };
  };
  return {
    host,
    port,
    user,
    password,
    authorization,
    pushBlob,
    pushManifest,
    pushDiskArtifact: async (repo, tag, layer, disktype) => {
      const config = await pushBlob(repo, Buffer.from('{}'), MEDIA.empty);
      return pushManifest(
        repo,
        tag,
        {
          schemaVersion: 2,
          mediaType: MEDIA.manifest,
          artifactType: DISK_ARTIFACT,
          config,
          layers: [layer],
          ...(disktype ? { annotations: { disktype } } : {}),
        },
        MEDIA.manifest,
      );
    },
    deleteBlob: async (repo, digest) => {
      await call('DELETE', `/v2/${repo}/blobs/${digest}`, {}, undefined, 202);
    },
    blobDataPath: (digest) => {
      const hex = digest.split(':')[1]!;
      return join(storage, 'docker/registry/v2/blobs/sha256', hex.slice(0, 2), hex, 'data');
    },
    stop,
  };
}
