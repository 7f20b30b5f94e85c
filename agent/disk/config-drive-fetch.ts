// Downloads a config drive given as a URL with the image pipeline's client (its TLS settings, retries of
// 5xx and transport errors, no retry of 4xx), capped so a wrong URL cannot fill the ramdisk's memory.
import type { AgentServices } from '../commands/types.ts';
import { ConfigDriveError, errorText } from '../errors.ts';
import { Dispatchers } from '../image/dispatchers.ts';
import { ImageFetcher } from '../image/fetch.ts';
import { shownUrl } from '../image/url-credentials.ts';

/** GETs `url` (http or https) as `config.image` says. Any failure is a ConfigDriveError naming the URL (without credentials). */
export async function downloadConfigDrive(services: Pick<AgentServices, 'config' | 'log'>, url: string, maxBytes: number): Promise<Buffer> {
  const { image, tls } = services.config;
  const dispatchers = new Dispatchers({
    connectTimeoutMs: image.connectTimeoutS * 1000,
    stallTimeoutMs: image.connectTimeoutS * 1000,
    insecure: tls.insecure,
    caFile: tls.caFile,
    minTlsVersion: tls.minVersion,
    proxies: {},
  });
  const fetcher = new ImageFetcher(dispatchers, { retries: image.retries, retryIntervalMs: image.retryIntervalS * 1000, deadline: 0, log: services.log });
  try {
    const opened = await fetcher.open([url]);
    const chunks: Buffer[] = [];
    let total = 0;
    for await (const chunk of opened.body) {
      total += (chunk as Buffer).length;
      if (total > maxBytes) {
        opened.cancel();
        throw new ConfigDriveError(`The config drive at '${shownUrl(url)}' is larger than ${maxBytes} bytes`);
      }
      chunks.push(chunk as Buffer);
    }
    return Buffer.concat(chunks);
  } catch (err) {
    if (err instanceof ConfigDriveError) throw err;
    throw new ConfigDriveError(`Can't download the configdrive content from '${shownUrl(url)}': ${errorText(err)}`);
  } finally {
    await dispatchers.close();
  }
}
