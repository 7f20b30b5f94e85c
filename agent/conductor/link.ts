// The agent's link to the conductor, from boot to power-off: discover the API version, wait for a NIC,
// look the node up, start the API (HTTPS with an auto-TLS certificate when the conductor is ≥ 1.68),
// then heartbeat. Two ways to start over:
// - the conductor rejects the token (it wiped it): forget token and history, look up again, keep the
//   API, certificate and callback URL;
// - a simulated power-off/reboot: stop everything, wait `simulated-reboot-delay`, boot again from the
//   top (new token, new certificate, API started anew).
import type { Agent } from '../agent.ts';
import type { RunningServer, TlsMaterial } from '../api/server.ts';
import type { Config } from '../config/config.ts';
import type { Logger } from '../log.ts';
import { realClock, type Clock } from '../clock.ts';
import { advertiseHost, callbackUrl } from './advertise.ts';
import { certificateServes, generateCertificate, generateKeys, type AgentKeys } from './auto-tls.ts';
import { LookupNodeError, NoNetworkError } from './errors.ts';
import { Heartbeater, type BeatEvent, type HeartbeatTarget } from './heartbeat.ts';
import { restartLine } from '../last-words.ts';
import { IronicApi } from './ironic-api.ts';
import { lookupNode, type LookupResult } from './lookup.ts';
import { acceptToken, type LookupConfig } from './lookup-reply.ts';
import { inspectUntilAnswered, type InspectionDeps } from '../inspect/flow.ts';
import { nicMacs, waitForNicMacs } from './nics.ts';
import { lookupKeysNotActedOn } from '../config/lookup-keys.ts';
import { enableVlanInterfaces, liveVlanSetup } from '../inspect/vlans.ts';
import { V_TOKEN_ON_GET, V_VERIFY_CA, VersionCache } from './versions.ts';

export interface LinkOptions {
  clock?: Clock;
  random?: () => number;
  /** A restart (token rejected, simulated power cycle) failed for good; main.ts exits on it. */
  onFatal?: (err: Error) => void;
  /** Where the NICs' MACs come from: sysfs, unless a harness hands in its own. */
  nics?: () => Promise<string[]>;
  /** Test overrides of the inspection's sources and collectors. */
  inspection?: Pick<InspectionDeps, 'sources' | 'collectors'>;
}

interface Boot {
  /** Aborted when this boot is superseded (power cycle) or the link stops. */
  abort: AbortController;
  versions?: VersionCache;
  /** The conductor's API version: a first guess until a lookup succeeds, then the one that lookup spoke. */
  version?: number;
  macs?: string[];
  target?: HeartbeatTarget;
  server?: RunningServer;
  heartbeater?: Heartbeater;
  /** The auto-TLS key pair, started at the beginning of the boot. */
  keys?: Promise<AgentKeys>;
}

/**
 * The configuration with the image settings a lookup reply overrides, as IPA applies them to its own; a new value,
 * so that the Config the agent was built from stays as it was given.
 */
export function withLookupConfig(config: Config, lc: LookupConfig): Config {
  const image = { ...config.image };
  if (lc.md5Enabled !== undefined) image.md5Enabled = lc.md5Enabled;
  if (lc.disableDeepImageInspection !== undefined) image.disableDeepInspection = lc.disableDeepImageInspection;
  if (lc.permittedImageFormats) image.permittedFormats = lc.permittedImageFormats;
  // As IPA: the conductor can only turn it on; its default (false) never undoes an operator's local opt-in.
  const enableBiosBootloaderInstall = config.enableBiosBootloaderInstall || lc.enableBiosBootloaderInstall === true;
  return { ...config, image, enableBiosBootloaderInstall };
}

export class ConductorLink {
  readonly api: IronicApi;
  private readonly clock: Clock;
  private readonly random: () => number;
  private boot?: Boot;
  /** Restarts run one after another, never interleaved with each other. */
  private queue: Promise<void> = Promise.resolve();
  private closed = false;
  /** Keeps the process alive once quiesced (lockdown, rescue): the agent must idle, not exit. */
  private idle?: NodeJS.Timeout;

  constructor(
    private readonly agent: Agent,
    private readonly config: Config,
    private readonly log: Logger,
    private readonly opts: LinkOptions = {},
  ) {
    this.clock = opts.clock ?? realClock;
    this.random = opts.random ?? Math.random;
    this.api = new IronicApi({
      urls: config.apiUrls,
      timeoutS: config.lookup.httpRequestTimeoutS,
      clock: this.clock,
      requestId: config.globalRequestId,
      insecure: config.tls.insecure,
      caFile: config.tls.caFile,
      log,
    });
    agent.executor.on('async-done', () => this.boot?.heartbeater?.force());
    agent.services.host.on('simulated-restart', (action) => void this.powerCycle(action));
    agent.services.host.on('quiesce', (reason) => void this.quiesce(reason));
  }

  /** Lockdown or rescue: no API, no heartbeat, no new boot; the process idles until it is stopped. */
  quiesce(reason: string): Promise<void> {
    this.boot?.abort.abort();
    return this.enqueue(async () => {
      this.closed = true;
      const boot = this.boot;
      this.boot = undefined;
      await boot?.heartbeater?.stop();
      await boot?.server?.close();
      this.idle ??= setInterval(() => undefined, 2 ** 30);
      this.state.update({ phase: reason === 'lockdown' ? 'locked down' : 'rescued' });
      this.log.info({ reason }, 'API and heartbeat stopped; idling');
    });
  }

  private get state() {
    return this.agent.services.state;
  }

  /** The running API server of the current boot (tests read its port). */
  get server(): RunningServer | undefined {
    return this.boot?.server;
  }

  /** Boots once: resolves when the API is up and heartbeating began; rejects on a fatal error. */
  start(): Promise<void> {
    return this.enqueue(() => this.bootFromTop());
  }

  /** A simulated power-off or reboot: the agent goes away and comes back as if freshly booted. */
  powerCycle(action: string): Promise<void> {
    // A lookup or heartbeat of the old boot ends now, not when its own timeout expires.
    this.boot?.abort.abort();
    return this.enqueue(async () => {
      this.log.info({ action, delayS: this.config.simulatedRebootDelayS }, 'simulated power cycle');
      await this.shutdown();
      this.state.update({ phase: `simulated ${action}` });
      await this.clock.sleep(this.config.simulatedRebootDelayS * 1000);
      if (!this.closed) await this.bootFromTop();
    }, true);
  }

  async stop(): Promise<void> {
    this.closed = true;
    if (this.idle) clearInterval(this.idle);
    await this.shutdown();
    await this.api.close();
  }

  private enqueue(job: () => Promise<void>, reportFatal = false): Promise<void> {
    const run = this.queue.then(job);
    this.queue = run.catch(() => undefined);
    if (!reportFatal) return run;
    return run.catch((err: Error) => {
      if (!this.closed) this.opts.onFatal?.(err);
    });
  }

  private async shutdown(): Promise<void> {
    const boot = this.boot;
    this.boot = undefined;
    if (boot) {
      boot.abort.abort();
      await boot.heartbeater?.stop();
      await boot.server?.close();
    }
    await this.agent.executor.reset('the agent was powered off or rebooted (simulated)');
    this.state.setToken(this.config.token.agentToken ?? null);
    this.state.autoTls = null;
    this.state.update({ node: undefined, callbackUrl: undefined });
  }

  /** Runs a step of `boot`; once the boot is superseded or stopped, its failure no longer matters. */
  private async within(boot: Boot, step: () => Promise<void>): Promise<void> {
    try {
      await step();
    } catch (err) {
      if (boot.abort.signal.aborted) {
        this.log.info({ err: (err as Error).message }, 'boot superseded');
        return;
      }
      throw err;
    }
  }

  private bootFromTop(): Promise<void> {
    const boot: Boot = { abort: new AbortController() };
    this.boot = boot;
    return this.within(boot, () => this.bootSteps(boot));
  }

  private async bootSteps(boot: Boot): Promise<void> {
    const { signal } = boot.abort;
    if (this.config.apiUrls.includes('mdns')) {
      throw new LookupNodeError(
        'ipa-api-url=mdns: finding the conductor by mDNS is not supported; give its http(s) URL',
      );
    }
    if (this.config.tls.autoTls) {
      boot.keys = generateKeys(this.config.tls.certificateCurve);
      boot.keys.catch(() => undefined);
    }
    boot.versions = new VersionCache(this.api, this.config.lookup.ironicApiVersion, this.log);
    this.state.update({ phase: 'finding conductor', conductorUrl: this.api.current });
    this.useVersion(boot, await boot.versions.get(signal));
    this.state.update({ phase: 'waiting for network', conductorUrl: this.api.current });
    await this.clock.sleep(this.config.hardwareInitDelayS * 1000, signal);
    boot.macs = await waitForNicMacs(this.config.lookup.nicWaitS, this.clock, signal, this.opts.nics);
    if (boot.macs.length === 0) {
      throw new NoNetworkError(
        `no network interface with a MAC address appeared within ${this.config.lookup.nicWaitS} s`,
      );
    }
    // IPA makes them in its first inventory, before inspection and lookup; lookup then sends their MACs too.
    if ((await enableVlanInterfaces(liveVlanSetup(this.config, this.log))).length > 0)
      boot.macs = await (this.opts.nics ?? nicMacs)();
    const found = await this.lookup(boot, await this.inspectFirst(boot));
    const version = found.version;

    const host = await advertiseHost(this.config, this.api.current, { clock: this.clock, log: this.log, signal });
    const tls = await this.tlsFor(boot, version, host, found.config);
    boot.server = await this.agent.listen(tls);
    if (signal.aborted) return boot.server.close();
    const protocol = tls ? 'https' : this.config.advertise.protocol;
    // Listening on port 0 (tests) means "any": advertise the port actually bound.
    const port = this.config.listen.port === 0 ? boot.server.port : this.config.advertise.port;
    boot.target = {
      nodeUuid: found.node.uuid,
      callbackUrl: callbackUrl(protocol, host, port),
      version,
      heartbeatTimeoutS: found.config.heartbeatTimeoutS,
      agentVersion: this.state.status.version,
      token: () => this.state.agentToken,
      verifyCa: tls?.cert,
    };
    this.log.info({ callbackUrl: boot.target.callbackUrl, tls: Boolean(tls) }, 'agent API listening');
    this.state.update({ callbackUrl: boot.target.callbackUrl });
    this.startHeartbeating(boot);
  }

  /**
   * With a callback URL, inspect before lookup (IPA's order); the node UUID it names narrows the lookup. A
   * conductor at ≥ 1.84 hands the agent token out in its reply, and lookup then shows only "******".
   */
  private async inspectFirst(boot: Boot): Promise<string | undefined> {
    if (this.config.inspection.callbackUrls.length === 0) return undefined;
    const result = await inspectUntilAnswered({
      config: this.config,
      log: this.log,
      logRing: this.agent.services.logRing,
      state: this.state,
      clock: this.clock,
      signal: boot.abort.signal,
      conductorVersion: boot.version,
      ...this.opts.inspection,
    });
    const offered = result.lookup?.config.agentToken ?? null;
    const token = acceptToken(offered, this.state.agentToken);
    if (token) this.state.setToken(token);
    return result.nodeUuid;
  }

  private async lookup(boot: Boot, nodeUuid?: string): Promise<LookupResult> {
    this.state.update({ phase: 'lookup' });
    const found = await lookupNode(
      {
        macs: boot.macs!,
        nodeUuid,
        versions: boot.versions!,
        // The configured token, or one carried over a crash (main.ts); reset to the configured one on every new boot.
        heldToken: this.state.agentToken,
        timeoutS: this.config.lookup.timeoutS,
        intervalS: this.config.lookup.intervalS,
      },
      { api: this.api, clock: this.clock, random: this.random, log: this.log, signal: boot.abort.signal },
    );
    // Commands started from now on see the conductor's settings; one already running keeps the ones it began with.
    this.agent.services.config = withLookupConfig(this.agent.services.config, found.config);
    const ignored = lookupKeysNotActedOn(found.config.raw);
    if (ignored.length > 0) this.log.warn({ keys: ignored }, `lookup config not acted on: ${ignored.join(', ')}`);
    this.useVersion(boot, found.version);
    if (boot.target) boot.target.version = found.version;
    this.state.setToken(found.token);
    this.state.update({ node: found.node, conductorUrl: this.api.current });
    if (boot.target) boot.target.heartbeatTimeoutS = found.config.heartbeatTimeoutS;
    return found;
  }

  private useVersion(boot: Boot, version: number): void {
    boot.version = version;
    // A conductor that sends the token on every GET gets no unauthenticated GET, not even the first.
    this.state.conductorSendsGetToken = version >= V_TOKEN_ON_GET;
  }

  private async tlsFor(boot: Boot, version: number, host: string, lc: LookupConfig): Promise<TlsMaterial | undefined> {
    if (version < V_VERIFY_CA || !boot.keys) return undefined;
    // One carried over a crash (main.ts) while it fits; a new boot (shutdown) always makes a new one.
    const carried = this.state.autoTls;
    const { key, cert } =
      carried && certificateServes(carried, host) ? carried : generateCertificate(host, await boot.keys);
    if (carried && carried.cert !== cert)
      this.log.warn('the certificate carried over the restart no longer fits: made a new one');
    this.state.autoTls = { key, cert };
    const ciphers = lc.tlsCipherSuites ?? this.config.tls.cipherSuites;
    return { key, cert, minVersion: lc.tlsMinVersion ?? this.config.tls.minVersion, ...(ciphers ? { ciphers } : {}) };
  }

  private startHeartbeating(boot: Boot): void {
    const hb = new Heartbeater(boot.target!, { api: this.api, clock: this.clock, random: this.random, log: this.log });
    boot.heartbeater = hb;
    hb.on('beat', (e: BeatEvent) => {
      // The conductor's operator reads the agent's log through it: the first beat says this run follows a crash.
      const crash = this.state.status.restartedAfter;
      if (crash && !this.state.status.lastHeartbeat) {
        this.log.warn({ status: e.status, ok: e.ok, crash }, `first heartbeat, ${restartLine(crash)}`);
      }
      this.state.update({
        lastHeartbeat: {
          at: e.at / 1000,
          ok: e.ok,
          status: e.status !== undefined ? String(e.status) : (e.reason ?? 'no answer'),
        },
        conductorUrl: this.api.current,
      });
    });
    hb.on('token-rejected', (reason) => void this.enqueue(() => this.relookup(boot, reason), true));
    this.state.update({ phase: 'heartbeating' });
    hb.start();
  }

  /** The conductor wiped the token: the history it sees must start empty, and a new token is needed. */
  private async relookup(boot: Boot, reason: string): Promise<void> {
    if (this.boot !== boot) return;
    this.log.warn({ reason }, 'conductor rejected the agent token: forgetting token and history, looking up again');
    await boot.heartbeater?.stop();
    boot.heartbeater = undefined;
    // The conductor no longer knows what runs here: it is cancelled, and nothing new starts until it is gone.
    await this.agent.executor.reset('the conductor rejected the agent token and the agent forgot its commands');
    this.state.setToken(this.config.token.agentToken ?? null);
    this.state.update({ node: undefined });
    await this.within(boot, async () => {
      await this.lookup(boot);
      if (this.boot === boot && !boot.abort.signal.aborted) this.startHeartbeating(boot);
    });
  }
}
