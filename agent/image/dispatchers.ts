// Which undici dispatcher carries a request: direct or through the proxy `image_info` names for the URL's
// scheme, unless `no_proxy` covers the host. TLS (insecure, CA file, minimum version) applies to all.
import { readFileSync } from 'node:fs';
import { BlockList, isIP } from 'node:net';
import { Agent, ProxyAgent, proxyPool, redirect, type Dispatcher } from '../undici.ts';
import { InvalidCommandParamsError } from '../errors.ts';

export interface DispatchOptions {
  connectTimeoutMs: number;
  /** No byte for this long (headers or body) counts as a stalled connection. */
  stallTimeoutMs: number;
  insecure: boolean;
  caFile?: string;
  minTlsVersion: '1.2' | '1.3';
  proxies: { http?: string; https?: string };
  noProxy?: string;
}

/** Whether `host` is an IP address inside `network`/`prefix`, of the same family. */
function inSubnet(host: string, network: string, prefix: number): boolean {
  const family = isIP(network);
  if (family === 0 || isIP(host) !== family || prefix > (family === 4 ? 32 : 128)) return false;
  const type = family === 4 ? 'ipv4' : 'ipv6';
  const subnet = new BlockList();
  subnet.addSubnet(network, prefix, type);
  return subnet.check(host, type);
}

/**
 * `no_proxy` as curl and requests read it: `*`, host names / domain suffixes with an optional port, and
 * (as both do for IPv4, curl for IPv6 too) address ranges such as `10.0.0.0/8`.
 */
export function bypassesProxy(url: URL, noProxy: string | undefined): boolean {
  if (!noProxy) return false;
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  for (const raw of noProxy.split(/[\s,]+/)) {
    const entry = raw.trim().toLowerCase();
    if (!entry) continue;
    if (entry === '*') return true;
    const cidr = /^([^/]+)\/(\d{1,3})$/.exec(entry);
    if (cidr) {
      if (inSubnet(host, cidr[1]!.replace(/^\[|\]$/g, ''), Number(cidr[2]))) return true;
      continue;
    }
    // A bare IPv6 address has several colons and no port; a port needs the bracketed form.
    const m =
      entry.split(':').length > 2 && !entry.startsWith('[')
        ? [entry, entry]
        : /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(entry);
    if (!m) continue;
    if (m[2] && m[2] !== port) continue;
    const name = m[1]!.replace(/^\[|\]$/g, '').replace(/^\*?\./, '');
    if (host === name || host.endsWith(`.${name}`)) return true;
  }
  return false;
}

export class Dispatchers {
  private readonly cache = new Map<string, Dispatcher>();
  private readonly tls: Record<string, unknown>;

  constructor(private readonly opts: DispatchOptions) {
    let ca: string | undefined;
    if (opts.caFile) {
      try {
        ca = readFileSync(opts.caFile, 'utf8');
      } catch (err) {
        throw new InvalidCommandParamsError(`cannot read the CA file ${opts.caFile}: ${(err as Error).message}`);
      }
    }
    this.tls = {
      rejectUnauthorized: !opts.insecure,
      minVersion: opts.minTlsVersion === '1.3' ? 'TLSv1.3' : 'TLSv1.2',
      ...(ca ? { ca } : {}),
    };
  }

  /** The proxy URL a request to `url` goes through, or undefined for a direct connection. */
  proxyFor(url: URL): string | undefined {
    const proxy = url.protocol === 'https:' ? this.opts.proxies.https : this.opts.proxies.http;
    return proxy && !bypassesProxy(url, this.opts.noProxy) ? proxy : undefined;
  }

  forUrl(url: URL): Dispatcher {
    const proxy = this.proxyFor(url);
    const key = proxy ? `${url.protocol}${proxy}` : 'direct';
    let d = this.cache.get(key);
    if (!d) {
      d = this.build(url.protocol, proxy);
      this.cache.set(key, d);
    }
    return d;
  }

  private build(protocol: string, proxy: string | undefined): Dispatcher {
    const common = {
      headersTimeout: this.opts.stallTimeoutMs,
      bodyTimeout: this.opts.stallTimeoutMs,
      connectTimeout: this.opts.connectTimeoutMs,
      // HTTP/1.1 only, as IPA's client: undici 8 would otherwise offer h2 to HTTPS servers, a second transport
      // whose breaks, stalls and back-pressure no fault test here covers (test/image/download-faults.device.test.ts).
      allowH2: false,
    };
    const base = proxy
      ? new ProxyAgent({
          ...common,
          uri: proxy,
          // Plain http goes to the proxy as an absolute-URI request; https is tunnelled with CONNECT.
          proxyTunnel: protocol === 'https:',
          // The proxy's own connection and the tunnelled one are opened by connectors that do not see
          // `allowH2` above: without it here they offer h2 to an HTTPS proxy or server that speaks it.
          requestTls: { ...this.tls, timeout: this.opts.connectTimeoutMs, allowH2: false },
          proxyTls: { ...this.tls, timeout: this.opts.connectTimeoutMs, allowH2: false },
          clientFactory: proxyPool,
        })
      : new Agent({ ...common, connect: { ...this.tls, timeout: this.opts.connectTimeoutMs } });
    return base.compose(redirect({ maxRedirections: 5 }));
  }

  /** Ends every connection, including any whose body nobody read to the end. */
  async close(): Promise<void> {
    await Promise.all([...this.cache.values()].map((d) => d.destroy().catch(() => undefined)));
    this.cache.clear();
  }
}
