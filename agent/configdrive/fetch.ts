// Downloads a config drive given as a URL with the image pipeline's client (its TLS settings, retries of
// 5xx and transport errors, no retry of 4xx), capped so a wrong URL cannot fill the ramdisk's memory.
import type { AgentServices } from '../services.ts';
import { ConfigDriveError, errorText } from '../errors.ts';
import { Dispatchers } from '../image/dispatchers.ts';
import { Transfer } from '../image/transfer.ts';
import { readBounded } from '../image/http.ts';
import { shownUrl } from '../image/url-credentials.ts';

/**
 * GETs `url` (http or https) as `config.image` says. Any failure is a ConfigDriveError naming the URL (without
 * credentials).
 */
export async function downloadConfigDrive(
  services: Pick<AgentServices, 'config' | 'log' | 'clock'>,
  url: string,
  maxBytes: number,
  /** The command's cancellation: the download and its retries stop at once. */
  signal?: AbortSignal,
): Promise<Buffer> {
  const { image, tls } = services.config;
  const dispatchers = new Dispatchers({
    connectTimeoutMs: image.connectTimeoutS * 1000,
    stallTimeoutMs: image.connectTimeoutS * 1000,
    insecure: tls.insecure,
    caFile: tls.caFile,
    minTlsVersion: tls.minVersion,
    proxies: {},
  });
  const { log, clock } = services;
  const transfer = new Transfer(dispatchers, {
    retries: image.retries,
    retryIntervalMs: image.retryIntervalS * 1000,
    maxDurationMs: 0,
    log,
    clock,
    cancel: signal,
  });
  try {
    const opened = await transfer.open([url]);
    const tooLong = () =>
      new ConfigDriveError(`The config drive at '${shownUrl(url)}' is larger than ${maxBytes} bytes`);
    return await readBounded(opened.body, opened.cancel, maxBytes, tooLong);
  } catch (err) {
    if (err instanceof ConfigDriveError) throw err;
    throw new ConfigDriveError(`Can't download the configdrive content from '${shownUrl(url)}': ${errorText(err)}`);
  } finally {
    await dispatchers.close();
  }
}
