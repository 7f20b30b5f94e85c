// A stand-in for the Ironic API's ramdisk endpoints, on loopback, answering as Ironic (2026 HEAD,
// conductor.md §3.4, §4, §5.3) does: `GET /` with the version range, `GET /v1/lookup` (404 for an
// unknown MAC or a node not in a lookup state, the token once and then "******", 409 when queued),
// `POST /v1/heartbeat/<uuid>` (202; 400 for a bad token, a changed callback URL or certificate,
// http:// while TLS is required). Errors carry Ironic's `{"error_message": "<JSON string>"}` body.
// Every request is recorded. `mode` simulates a conductor that is down ('reset') or never answers
// ('hang'); `powerAction()` wipes token, URL and certificate as every Ironic power action does;
// `clientFor()` drives the agent with what the node's heartbeat stored. Usable from scripts:
//
//   const fake = await FakeConductor.start({ nodes: [{ macs: await nicMacs() }] });
//   // start the agent with --ipa-api-url=${fake.url}, then:
//   const node = [...fake.nodes.values()][0]!;
//   await fake.waitFor(() => node.internal.agent_url !== undefined, 'the first heartbeat');
//   const agent = fake.clientFor(node.uuid);       // token + CA from the heartbeat
//   await agent.command('deploy.get_deploy_steps', { node: {}, ports: [] }, { wait: true });
//   fake.powerAction(node.uuid);                   // as Ironic does around a reboot
//   await agent.close(); await fake.close();
import { randomBytes, randomUUID } from 'node:crypto';
import { EventEmitter } from 'node:events';
import {
  createServer,
  type IncomingHttpHeaders,
  type IncomingMessage,
  type Server,
  type ServerResponse,
} from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { AgentClient, pythonJson, type AgentClientOptions } from './agent-client.ts';

export interface FakeNodeSpec {
  uuid?: string;
  macs: string[];
  /** Restricted lookup: false answers 404 as for a node in a state like `available`. Default true. */
  lookupAllowed?: boolean;
  /** A token made before boot (virtual media `ipa-agent-token`): lookup then answers "******". */
  pregeneratedToken?: string;
  properties?: Record<string, unknown>;
  instanceInfo?: Record<string, unknown>;
}

export interface FakeNode {
  uuid: string;
  macs: string[];
  lookupAllowed: boolean;
  properties: Record<string, unknown>;
  instanceInfo: Record<string, unknown>;
  /** driver_internal_info as Ironic keeps it: agent_secret_token, agent_url, agent_verify_ca, … */
  internal: {
    agent_secret_token?: string;
    agent_secret_token_pregenerated?: boolean;
    agent_url?: string;
    agent_verify_ca?: string;
    agent_version?: string;
    agent_last_heartbeat?: string;
  };
}

export interface FakeConductorOptions {
  /** Highest API version (`default_version.version`). Default 1.115 (Ironic 2026); 21.4 is 1.82. */
  maxVersion?: string;
  /** config.heartbeat_timeout ([api]ramdisk_heartbeat_timeout). Default 300. */
  heartbeatTimeout?: number;
  /** config.tls_min_version; null leaves the key out (older Ironic). Default "1.3". */
  tlsMinVersion?: '1.2' | '1.3' | null;
  /** [agent]require_tls; Ironic's default is true. */
  requireTls?: boolean;
  nodes?: FakeNodeSpec[];
  /** Address to listen on (an ephemeral port). Default 127.0.0.1; `::1` for IPv6. */
  host?: string;
}

export interface RecordedRequest {
  at: number;
  method: string;
  path: string;
  query: Record<string, string>;
  headers: IncomingHttpHeaders;
  rawBody: string;
  body?: unknown;
  status: number;
  /** For heartbeats: the fault text when refused. */
  fault?: string;
}

export type ConductorMode = 'normal' | 'reset' | 'hang';

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
const LOOKUP_MIN = 22;

function minor(v: string): number {
  return Number(v.split('.')[1]);
}

export class FakeConductor extends EventEmitter<{ request: [RecordedRequest] }> {
  readonly nodes = new Map<string, FakeNode>();
  readonly requests: RecordedRequest[] = [];
  mode: ConductorMode = 'normal';
  readonly maxVersion: string;
  heartbeatTimeout: number;
  tlsMinVersion: '1.2' | '1.3' | null;
  requireTls: boolean;
  private readonly lookupQueue: number[] = [];
  private readonly rootQueue: number[] = [];
  private readonly heartbeatQueue: number[] = [];
  private readonly sockets = new Set<Socket>();

  private constructor(
    private readonly server: Server,
    opts: FakeConductorOptions,
  ) {
    super();
    this.maxVersion = opts.maxVersion ?? '1.115';
    this.heartbeatTimeout = opts.heartbeatTimeout ?? 300;
    this.tlsMinVersion = opts.tlsMinVersion === undefined ? '1.3' : opts.tlsMinVersion;
    this.requireTls = opts.requireTls ?? true;
    for (const spec of opts.nodes ?? []) this.addNode(spec);
  }

  static async start(opts: FakeConductorOptions = {}): Promise<FakeConductor> {
    const server = createServer();
    const fake = new FakeConductor(server, opts);
    server.on('connection', (s) => {
      fake.sockets.add(s);
      s.once('close', () => fake.sockets.delete(s));
      if (fake.mode === 'reset') s.destroy();
    });
    server.on('request', (req, res) => void fake.handle(req, res));
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(0, opts.host ?? '127.0.0.1', resolve);
    });
    return fake;
  }

  get url(): string {
    const { address, family, port } = this.server.address() as AddressInfo;
    return `http://${family === 'IPv6' ? `[${address}]` : address}:${port}`;
  }

  get lookups(): RecordedRequest[] {
    return this.requests.filter((r) => r.path === '/v1/lookup');
  }

  get heartbeats(): RecordedRequest[] {
    return this.requests.filter((r) => r.path.startsWith('/v1/heartbeat/'));
  }

  addNode(spec: FakeNodeSpec): FakeNode {
    const node: FakeNode = {
      uuid: spec.uuid ?? randomUUID(),
      macs: spec.macs.map((m) => m.toLowerCase()),
      lookupAllowed: spec.lookupAllowed ?? true,
      properties: spec.properties ?? { cpu_arch: 'x86_64' },
      instanceInfo: spec.instanceInfo ?? {},
      internal: spec.pregeneratedToken
        ? { agent_secret_token: spec.pregeneratedToken, agent_secret_token_pregenerated: true }
        : {},
    };
    this.nodes.set(node.uuid, node);
    return node;
  }

  node(uuid: string): FakeNode {
    const n = this.nodes.get(uuid);
    if (!n) throw new Error(`fake conductor: no node ${uuid}`);
    return n;
  }

  /** The next lookups answer these statuses (409 = NodeLocked while creating the token). */
  queueLookup(...statuses: number[]): void {
    this.lookupQueue.push(...statuses);
  }

  /** The next `GET /` (the API version discovery) answer these statuses, as an API still starting does. */
  queueRoot(...statuses: number[]): void {
    this.rootQueue.push(...statuses);
  }

  queueHeartbeat(...statuses: number[]): void {
    this.heartbeatQueue.push(...statuses);
  }

  /** What every Ironic power-off/reboot does to the node (wipe_internal_info_on_power_off). */
  powerAction(uuid: string): void {
    const i = this.node(uuid).internal;
    delete i.agent_url;
    delete i.agent_verify_ca;
    if (!i.agent_secret_token_pregenerated) delete i.agent_secret_token;
  }

  /** Resolves once `check()` holds (re-checked on every request), or rejects after `timeoutMs`. */
  waitFor(check: () => boolean, what: string, timeoutMs = 15_000): Promise<void> {
    if (check()) return Promise.resolve();
    return new Promise((resolve, reject) => {
      const onRequest = () => {
        if (!check()) return;
        cleanup();
        resolve();
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`fake conductor: timed out waiting for ${what}`));
      }, timeoutMs);
      const cleanup = () => {
        clearTimeout(timer);
        this.off('request', onRequest);
      };
      this.on('request', onRequest);
    });
  }

  /** A client that drives the agent as the conductor would, with what the node's heartbeat stored. */
  clientFor(uuid: string, opts: Partial<AgentClientOptions> = {}): AgentClient {
    const i = this.node(uuid).internal;
    if (!i.agent_url) throw new Error(`fake conductor: node ${uuid} has not heartbeated`);
    return new AgentClient({ url: i.agent_url, token: i.agent_secret_token, ca: i.agent_verify_ca, ...opts });
  }

  async close(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    if (this.mode === 'hang') return;
    if (this.mode === 'reset') {
      req.socket.destroy();
      return;
    }
    const url = new URL(req.url ?? '/', 'http://x');
    const rec: RecordedRequest = {
      at: Date.now(),
      method: req.method ?? '',
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: req.headers,
      rawBody: Buffer.concat(chunks).toString('utf8'),
      status: 0,
    };
    const reply = this.route(req, url, rec);
    rec.status = reply.status;
    this.requests.push(rec);
    res.writeHead(reply.status, {
      'X-OpenStack-Ironic-API-Minimum-Version': '1.1',
      'X-OpenStack-Ironic-API-Maximum-Version': this.maxVersion,
      'X-OpenStack-Ironic-API-Version': this.maxVersion,
      ...(reply.body === undefined ? {} : { 'Content-Type': 'application/json' }),
    });
    res.end(reply.body === undefined ? undefined : pythonJson(reply.body));
    this.emit('request', rec);
  }

  private route(req: IncomingMessage, url: URL, rec: RecordedRequest): { status: number; body?: unknown } {
    if (req.method === 'GET' && url.pathname === '/') {
      const queued = this.rootQueue.shift();
      return queued ? error(queued, 'Service Unavailable') : { status: 200, body: this.root() };
    }
    const header = req.headers['x-openstack-ironic-api-version'];
    const version = typeof header === 'string' ? minor(header) : 1;
    if (!Number.isFinite(version))
      return error(400, `Invalid value for X-OpenStack-Ironic-API-Version header: ${header}`);
    if (version > minor(this.maxVersion)) {
      return error(406, `Version ${header} was requested but the requested API is not supported for this version.`);
    }
    if (req.method === 'GET' && url.pathname === '/v1/lookup') return this.lookup(url, version);
    const hb = /^\/v1\/heartbeat\/([a-z0-9-]+?)(\.json)?$/.exec(url.pathname);
    if (req.method === 'POST' && hb) {
      const out = this.heartbeat(hb[1]!, version, rec);
      if (out.status !== 202) rec.fault = JSON.parse((out.body as { error_message: string }).error_message).faultstring;
      return out;
    }
    return error(404, 'Resource could not be found.');
  }

  private root(): unknown {
    const v = {
      id: 'v1',
      links: [{ href: `${this.url}/v1/`, rel: 'self' }],
      status: 'CURRENT',
      min_version: '1.1',
      version: this.maxVersion,
    };
    return {
      name: 'OpenStack Ironic API',
      description: 'Ironic is an OpenStack project which enables the provision and management of baremetal machines.',
      default_version: v,
      versions: [v],
    };
  }

  private lookup(url: URL, version: number): { status: number; body?: unknown } {
    if (version < LOOKUP_MIN) return error(404, 'Resource could not be found.');
    const addresses = (url.searchParams.get('addresses') ?? '')
      .split(',')
      .map((a) => a.trim().toLowerCase())
      .filter((a) => MAC.test(a));
    const uuid = url.searchParams.get('node_uuid');
    if (uuid !== null && !UUID.test(uuid)) return error(400, `Expected a UUID but received ${uuid}.`);
    if (addresses.length === 0 && uuid === null) {
      return error(
        400,
        "Incomplete lookup request: at least one of 'addresses' and 'node_uuid' parameters is required.",
      );
    }
    const node =
      uuid !== null
        ? this.nodes.get(uuid)
        : [...this.nodes.values()].find((n) => n.macs.some((m) => addresses.includes(m)));
    if (!node?.lookupAllowed) return error(404, 'Resource could not be found.');
    const queued = this.lookupQueue.shift();
    if (queued === 409) {
      return error(
        409,
        `Node ${node.uuid} is locked by host fake-conductor, please retry after the current operation is completed.`,
      );
    }
    if (queued !== undefined)
      return error(queued, queued === 404 ? 'Resource could not be found.' : `Simulated failure ${queued}`);
    let token: string | null = null;
    if (version >= 62) {
      if (node.internal.agent_secret_token) {
        token = '******';
      } else {
        token = randomBytes(32).toString('base64url');
        node.internal.agent_secret_token = token;
      }
    }
    return {
      status: 200,
      body: {
        node: {
          uuid: node.uuid,
          properties: node.properties,
          instance_info: { ...node.instanceInfo, ...(node.instanceInfo.image_url ? { image_url: '******' } : {}) },
          driver_internal_info: {
            ...node.internal,
            ...(node.internal.agent_secret_token ? { agent_secret_token: '******' } : {}),
          },
          links: [
            { href: `${this.url}/v1/nodes/${node.uuid}`, rel: 'self' },
            { href: `${this.url}/nodes/${node.uuid}`, rel: 'bookmark' },
          ],
        },
        config: ironicLookupConfig({
          token,
          heartbeatTimeout: this.heartbeatTimeout,
          tlsMinVersion: this.tlsMinVersion,
        }),
      },
    };
  }

  private heartbeat(id: string, version: number, rec: RecordedRequest): { status: number; body?: unknown } {
    if (version < LOOKUP_MIN) return error(404, 'Resource could not be found.');
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(rec.rawBody || '{}') as Record<string, unknown>;
    } catch {
      return error(400, 'The request body is not valid JSON');
    }
    rec.body = body;
    if (body.agent_version !== undefined && version < 36)
      return error(400, 'Field agent_version requires API version 1.36');
    if (body.agent_verify_ca !== undefined && version < 68)
      return error(400, 'Field agent_verify_ca requires API version 1.68');
    if (body.agent_status !== undefined && version < 72)
      return error(400, 'Field agent_status requires API version 1.72');
    const node = this.nodes.get(id);
    if (!node) return error(404, `Node ${id} could not be found.`);
    const callback = typeof body.callback_url === 'string' ? body.callback_url : '';
    if (callback !== '' && !new URL(callback).protocol.includes('http')) {
      return error(400, `Invalid callback URL: ${callback}`);
    }
    const i = node.internal;
    if (i.agent_url && i.agent_url !== callback)
      return error(400, 'Detected change in ramdisk provided "callback_url"');
    if (body.agent_token === undefined || body.agent_token === null) {
      return error(400, 'Agent token is required for heartbeat processing.');
    }
    const queued = this.heartbeatQueue.shift();
    if (queued !== undefined)
      return error(
        queued,
        queued === 409 ? `Node ${id} is locked by host fake-conductor.` : `Simulated failure ${queued}`,
      );
    if (body.agent_version === undefined && body.agent_status === undefined) {
      return error(400, 'Missing parameter agent_version');
    }
    if (!i.agent_secret_token || body.agent_token !== i.agent_secret_token) {
      return error(400, 'Invalid or missing agent token received.');
    }
    if (this.requireTls && !callback.startsWith('https://')) return error(400, 'TLS is required by configuration');
    const ca = typeof body.agent_verify_ca === 'string' ? body.agent_verify_ca : undefined;
    if (ca && i.agent_verify_ca && ca.trim() !== i.agent_verify_ca.trim()) {
      return error(400, 'Detected change in ramdisk provided "agent_verify_ca"');
    }
    i.agent_url = callback;
    i.agent_version = String(body.agent_version);
    i.agent_last_heartbeat = new Date().toISOString();
    if (ca) i.agent_verify_ca = ca;
    return { status: 202 };
  }
}

function error(status: number, faultstring: string): { status: number; body: unknown } {
  const faultcode = status >= 500 ? 'Server' : 'Client';
  return { status, body: { error_message: pythonJson({ faultcode, faultstring, debuginfo: null }) } };
}

/** The `config` of Ironic's lookup reply as Ironic sends it by default (its test_ramdisk.py key set). */
export function ironicLookupConfig(opts: {
  token: string | null;
  heartbeatTimeout: number;
  tlsMinVersion: '1.2' | '1.3' | null;
}): Record<string, unknown> {
  return {
    metrics: {
      backend: 'noop',
      prepend_host: false,
      prepend_uuid: false,
      prepend_host_reverse: true,
      global_prefix: null,
    },
    metrics_statsd: { statsd_host: 'localhost', statsd_port: 8125 },
    heartbeat_timeout: opts.heartbeatTimeout,
    agent_containers: {
      allow_arbitrary_containers: false,
      allowed_containers: [],
      container_steps_file: '/etc/ironic-python-agent/container_steps.yaml',
      runner: 'podman',
      pull_options: '--tls-verify=false',
      run_options: '--rm --network=host --tls-verify=false',
    },
    agent_token: opts.token,
    agent_token_required: true,
    agent_md5_checksum_enable: true,
    disable_deep_image_inspection: false,
    permitted_image_formats: ['raw', 'gpt', 'qcow2', 'iso'],
    agent_skip_bmc_detect: false,
    enable_bios_bootloader_install: false,
    ...(opts.tlsMinVersion ? { tls_min_version: opts.tlsMinVersion } : {}),
    tls_cipher_suites: null,
  };
}
