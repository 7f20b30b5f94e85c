// The system clock from an NTP server at start (IPA's `ipa-ntp-server`). A node's RTC is often off by hours
// (kept in local time, or reset): the auto-TLS certificate, valid from an hour before "now", is then refused by
// Ironic as not yet valid, and HTTPS image servers' certificates look expired or not yet valid. One SNTP query
// (RFC 4330) over UDP; the reply must echo our transmit time and come from a synchronised server. The clock is
// set with `date` and the RTC with `hwclock`, only with --host-actions=real; elsewhere the offset is only logged.
import { createSocket } from 'node:dgram';
import { isIP } from 'node:net';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';

/** Seconds from the NTP era (1900) to the Unix epoch. */
const NTP_EPOCH_OFFSET_S = 2_208_988_800;
const PACKET_BYTES = 48;

function writeTimestamp(buf: Buffer, at: number, ms: number): void {
  const seconds = Math.floor(ms / 1000) + NTP_EPOCH_OFFSET_S;
  buf.writeUInt32BE(seconds >>> 0, at);
  buf.writeUInt32BE(Math.floor(((ms % 1000) / 1000) * 2 ** 32) >>> 0, at + 4);
}

function readTimestamp(buf: Buffer, at: number): number {
  return (buf.readUInt32BE(at) - NTP_EPOCH_OFFSET_S) * 1000 + (buf.readUInt32BE(at + 4) / 2 ** 32) * 1000;
}

/** The server's time now, by one SNTP exchange: local time plus the offset the exchange measured (ms since epoch). */
export async function ntpTime(server: string, opts: { port?: number; timeoutMs?: number } = {}): Promise<number> {
  const host = server.replace(/^\[|\]$/g, '');
  const socket = createSocket(isIP(host) === 6 ? 'udp6' : 'udp4');
  try {
    return await new Promise<number>((resolve, reject) => {
      const timer = setTimeout(
        () => reject(new Error(`no answer from NTP server ${server} within ${opts.timeoutMs ?? 5000} ms`)),
        opts.timeoutMs ?? 5000,
      );
      const request = Buffer.alloc(PACKET_BYTES);
      request[0] = 0x23; // LI 0, version 4, mode 3 (client)
      const sent = Date.now();
      // The server copies our transmit time into its originate field: a reply without it is not ours.
      writeTimestamp(request, 40, sent);
      socket.on('error', (err) => {
        clearTimeout(timer);
        reject(new Error(`NTP server ${server}: ${err.message}`));
      });
      socket.on('message', (reply) => {
        const arrived = Date.now();
        if (reply.length < PACKET_BYTES || !reply.subarray(24, 32).equals(request.subarray(40, 48))) return;
        clearTimeout(timer);
        const mode = reply[0]! & 0x07;
        const stratum = reply[1]!;
        if (mode !== 4 && mode !== 5) return reject(new Error(`NTP server ${server} answered in mode ${mode}`));
        if (stratum === 0 || stratum > 15 || (reply[0]! & 0xc0) === 0xc0)
          return reject(new Error(`NTP server ${server} is not synchronised (stratum ${stratum})`));
        const received = readTimestamp(reply, 32);
        const transmitted = readTimestamp(reply, 40);
        resolve(arrived + (received - sent + (transmitted - arrived)) / 2);
      });
      socket.send(request, opts.port ?? 123, host);
    });
  } finally {
    socket.close();
  }
}

/**
 * Sets the clock from `server` (host-actions real) or only measures the offset (simulated). Never throws: a node
 * without its NTP server still deploys, as with IPA, with the failure in the log.
 */
export async function syncClock(
  server: string,
  mode: 'real' | 'simulated',
  log: Logger,
  opts: { port?: number; timeoutMs?: number } = {},
): Promise<void> {
  let now: number;
  try {
    now = await ntpTime(server, opts);
  } catch (err) {
    log.warn({ server, err: (err as Error).message }, 'clock not synchronised: the NTP server did not answer');
    return;
  }
  const offsetMs = Math.round(now - Date.now());
  if (mode !== 'real') {
    log.info({ server, offsetMs }, 'NTP offset measured (simulated host actions: clock left as it is)');
    return;
  }
  try {
    await run('date', ['-u', '-s', `@${Math.round(now / 1000)}`], { log });
    await run('hwclock', ['-u', '-w'], { log }).catch((err: Error) =>
      log.warn({ err: err.message }, 'the system clock is set, the hardware clock could not be written'),
    );
    log.info({ server, offsetMs }, 'clock set from the NTP server');
  } catch (err) {
    log.warn({ server, offsetMs, err: (err as Error).message }, 'clock not synchronised: setting it failed');
  }
}
