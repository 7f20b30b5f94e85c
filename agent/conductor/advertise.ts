// Where the conductor should call the agent back: the advertise host (`ipa-advertise-host`, else the
// IPv4 of `ipa-network-interface`, else the source address of the route to the conductor) and the
// callback URL built from it. The URL must stay the same for a whole boot: Ironic refuses a change.
import { lookup as resolveName } from 'node:dns/promises';
import { isIP } from 'node:net';
import type { Config } from '../config/config.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';
import type { Clock } from '../clock.ts';
import { LookupAgentIPError } from './errors.ts';

export function callbackUrl(protocol: 'http' | 'https', host: string, port: number): string {
  return `${protocol}://${isIP(host) === 6 ? `[${host}]` : host}:${port}`;
}

function isLinkLocal(ip: string): boolean {
  return /^169\.254\./.test(ip) || /^fe[89ab][0-9a-f]:/i.test(ip);
}

/** `ip route get` prints e.g. `192.0.2.1 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0`. */
export function routeSource(output: string): string | undefined {
  const src = /\bsrc\s+(\S+)/.exec(output)?.[1];
  return src && isIP(src) && !isLinkLocal(src) ? src : undefined;
}

async function interfaceIPv4(name: string, log: Logger): Promise<string | undefined> {
  const out = await run('ip', ['-o', '-4', 'addr', 'show', 'dev', name], { log, timeoutMs: 10_000 });
  return /\binet\s+([0-9.]+)\//.exec(out.stdout)?.[1];
}

async function routeTo(conductorUrl: string, log: Logger): Promise<string | undefined> {
  const host = new URL(conductorUrl).hostname.replace(/^\[|\]$/g, '');
  const ip = isIP(host) ? host : (await resolveName(host)).address;
  const out = await run('ip', ['route', 'get', ip], { log, timeoutMs: 10_000 });
  return routeSource(out.stdout);
}

export async function advertiseHost(
  config: Config,
  conductorUrl: string,
  deps: { clock: Clock; log: Logger; signal?: AbortSignal },
): Promise<string> {
  if (config.advertise.host) return config.advertise.host;
  const { ipLookupAttempts, ipLookupSleepS } = config.lookup;
  let lastError = 'no source address';
  for (let i = 1; i <= ipLookupAttempts; i++) {
    try {
      const ip = config.networkInterface
        ? await interfaceIPv4(config.networkInterface, deps.log)
        : await routeTo(conductorUrl, deps.log);
      if (ip) return ip;
    } catch (err) {
      lastError = (err as Error).message;
    }
    if (deps.signal?.aborted) break;
    if (i < ipLookupAttempts) await deps.clock.sleep(ipLookupSleepS * 1000, deps.signal);
  }
  const via = config.networkInterface ? `interface ${config.networkInterface}` : `the route to ${conductorUrl}`;
  throw new LookupAgentIPError(
    `Could not find an advertise address from ${via} (${lastError}); set ipa-advertise-host`,
  );
}
