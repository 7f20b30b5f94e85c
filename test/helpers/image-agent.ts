// Drives an in-process agent through `standby.prepare_image` / `deploy.execute_deploy_step` over real HTTP
// on loopback, limited to the test's loop device, and checks what ended up on the device.
import { open, readFile } from 'node:fs/promises';
import { createHash } from 'node:crypto';
import { basename } from 'node:path';
import { execa } from 'execa';
import pino from 'pino';
import { call, startAgent, type RunningAgent } from './api-harness.ts';
import type { Clock } from '../../agent/clock.ts';
import type { Logger, LogRing } from '../../agent/log.ts';
import type { ImageServer } from './image-server.ts';
import { VirtualClock } from './virtual-clock.ts';

/** Short timeouts (real time: undici's) and retry intervals, so fault tests take seconds. */
export const FAST_FLAGS: Record<string, string> = {
  'ipa-image-download-connection-timeout': '1',
  'ipa-image-download-connection-retries': '2',
  'ipa-image-download-connection-retry-interval': '0.05',
};

/** An agent limited to `device`; its retry pauses run on `clock`, virtual time unless a test needs the wall's. */
export async function startImageAgent(
  device: string,
  flags: Record<string, string> = {},
  log?: Logger,
  clock: Clock = new VirtualClock(),
): Promise<RunningAgent> {
  const running = await startAgent({ 'device-allowlist': device, ...FAST_FLAGS, ...flags }, undefined, log, clock);
  running.agent.services.state.update({
    node: {
      uuid: 'ina-test-node',
      properties: { root_device: { name: device } },
      instance_info: {},
      driver_internal_info: {},
    },
  });
  return running;
}

export interface CommandJson {
  id: string;
  command_name: string;
  command_status: string;
  command_error: { type: string; code: number; message: string; details: string } | null;
  command_result: any;
}

export async function runCommand(agentUrl: string, name: string, params: Record<string, unknown>, wait = true) {
  return call(`${agentUrl}/v1/commands/?wait=${wait}`, { method: 'POST', body: JSON.stringify({ name, params }) });
}

/** Runs a command to its end and returns the final result object. */
export async function runToEnd(agentUrl: string, name: string, params: Record<string, unknown>): Promise<CommandJson> {
  const r = await runCommand(agentUrl, name, params, true);
  if (r.status !== 200) throw new Error(`${name}: HTTP ${r.status}: ${r.text}`);
  return r.json as CommandJson;
}

export function sha256(data: Buffer): string {
  return createHash('sha256').update(data).digest('hex');
}

/**
 * Serves `file` from `server` and runs `standby.prepare_image` for it, with its sha256 and `imageInfo`, through a
 * fresh agent limited to `device`; returns the command at its end. The name is fresh unless given, so that no
 * test is served an earlier one's image; with `ring`, the agent's log lines go there.
 */
export async function deployFile(
  server: ImageServer,
  device: string,
  file: string,
  imageInfo: Record<string, unknown>,
  opts: { flags?: Record<string, string>; ring?: LogRing; name?: string } = {},
): Promise<CommandJson> {
  const name = opts.name ?? `${Math.random().toString(16).slice(2)}-${basename(file)}`;
  const url = await server.serveFile(name, file);
  const agent = await startImageAgent(device, opts.flags, opts.ring && pino({ base: null }, opts.ring));
  try {
    return await runToEnd(agent.url, 'standby.prepare_image', {
      image_info: {
        id: name,
        urls: [url],
        os_hash_algo: 'sha256',
        os_hash_value: sha256(await readFile(file)),
        ...imageInfo,
      },
    });
  } finally {
    await agent.close();
  }
}

export async function readDevice(device: string, start: number, end: number): Promise<Buffer> {
  const fh = await open(device, 'r');
  try {
    const buf = Buffer.alloc(end - start);
    await fh.read(buf, 0, buf.length, start);
    return buf;
  } finally {
    await fh.close();
  }
}

/** Fills the first and last MiB of the device with a pattern, to tell later whether anything wrote there. */
export async function paint(device: string, size: number): Promise<Buffer> {
  const pattern = Buffer.alloc(1024 * 1024, 0xa5);
  const fh = await open(device, 'r+');
  try {
    await fh.write(pattern, 0, pattern.length, 0);
    await fh.write(pattern, 0, pattern.length, size - pattern.length);
    await fh.datasync();
  } finally {
    await fh.close();
  }
  return pattern;
}

export async function isPainted(device: string, size: number): Promise<boolean> {
  const pattern = Buffer.alloc(1024 * 1024, 0xa5);
  const head = await readDevice(device, 0, pattern.length);
  const tail = await readDevice(device, size - pattern.length, size);
  return head.equals(pattern) && tail.equals(pattern);
}

/** The marker file of the image's root partition, read with debugfs (no mount). */
export async function readMarker(partition: string): Promise<string> {
  const { stdout } = await execa('debugfs', ['-R', 'cat /ina-marker.txt', partition], { stderr: 'ignore' });
  return stdout.trim();
}

/**
 * Starts `standby.prepare_image` (no wait) on the agent at `agentUrl` for `file`, served at `url`, with its sha256:
 * what a conductor sends for a whole-disk image. Returns the reply as it came.
 */
export async function startPrepareImage(
  agentUrl: string,
  image: { name: string; url: string; file: string; format: string; stream: boolean },
): Promise<Awaited<ReturnType<typeof call>>> {
  const digest = sha256(await readFile(image.file));
  return call(`${agentUrl}/v1/commands/`, {
    method: 'POST',
    body: JSON.stringify({
      name: 'standby.prepare_image',
      params: {
        image_info: {
          id: image.name,
          urls: [image.url],
          os_hash_algo: 'sha256',
          os_hash_value: digest,
          disk_format: image.format,
          stream_raw_images: image.stream,
        },
      },
    }),
  });
}
