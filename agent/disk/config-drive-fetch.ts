// Downloads a config drive given as a URL, with the image options' timeout and retries: 5xx and transport
// errors are retried, 4xx is not, and the body is capped so a wrong URL cannot fill the ramdisk's memory.
import { setTimeout as sleep } from 'node:timers/promises';
import { readFileSync } from 'node:fs';
import { Agent, interceptors, request, type Dispatcher } from 'undici';
import type { AgentServices } from '../commands/types.ts';
import { ConfigDriveError, errorText } from '../errors.ts';

class Fatal extends Error {}

function dispatcherFor(services: Pick<AgentServices, 'config'>, timeoutMs: number): Agent {
  const tls = services.config.tls;
  return new Agent({
    connectTimeout: timeoutMs,
    headersTimeout: timeoutMs,
    bodyTimeout: timeoutMs,
    connect: {
      rejectUnauthorized: !tls.insecure,
      ...(tls.caFile ? { ca: readFileSync(tls.caFile) } : {}),
    },
  });
}

async function fetchOnce(url: string, dispatcher: Dispatcher, maxBytes: number): Promise<Buffer> {
  const res = await request(url, { dispatcher });
  if (res.statusCode !== 200) {
    const body = (await res.body.text().catch(() => '')).slice(0, 200);
    const msg = `HTTP ${res.statusCode} from ${url}${body ? `: ${body}` : ''}`;
    throw res.statusCode < 500 ? new Fatal(msg) : new Error(msg);
  }
  const chunks: Buffer[] = [];
  let total = 0;
  for await (const chunk of res.body) {
    total += (chunk as Buffer).length;
    if (total > maxBytes) {
      res.body.destroy();
      throw new Fatal(`the config drive at ${url} is larger than ${maxBytes} bytes`);
    }
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

/** GETs `url` (http or https), retrying as `config.image` says. Any final failure is a ConfigDriveError. */
export async function downloadConfigDrive(services: Pick<AgentServices, 'config' | 'log'>, url: string, maxBytes: number): Promise<Buffer> {
  const { connectTimeoutS, retries, retryIntervalS } = services.config.image;
  const agent = dispatcherFor(services, connectTimeoutS * 1000);
  const dispatcher = agent.compose(interceptors.redirect({ maxRedirections: 5 }));
  try {
    for (let attempt = 0; ; attempt++) {
      try {
        return await fetchOnce(url, dispatcher, maxBytes);
      } catch (err) {
        if (err instanceof Fatal || attempt >= retries) {
          throw new ConfigDriveError(`Can't download the configdrive content from '${url}': ${errorText(err)}`);
        }
        services.log.warn({ url, attempt: attempt + 1, err: errorText(err) }, 'config drive download failed, retrying');
        await sleep(retryIntervalS * 1000);
      }
    }
  } finally {
    await agent.close();
  }
}
