// The image-stall fault: one conductor's image server stops answering in the middle of the agents' downloads.
// Every node deploys at once; as soon as a conductor's nginx is sending an image to an agent, that nginx gets
// SIGSTOP (its connections stay open, new ones are queued by the kernel and never answered) for STALL_S, then
// SIGCONT. The agents run with IPA's defaults: a read that brings no byte for image_download_connection_timeout
// (60 s) breaks the download, and after image_download_connection_retry_interval (10 s) it resumes with Range
// (and If-Range); a request unanswered for 60 s is a failed attempt, retried up to 9 times. With a stall longer
// than that timeout each broken transfer resumes when the server answers again. Outcome: each node ends `active`,
// or `deploy failed` with a clear error and then a redeploy reaches `active`.
import { execFile } from 'node:child_process';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { agentMessages } from './heartbeats.ts';
import type { IronicRest } from './ironic-rest.ts';
import { redeployFailed, waitSettled } from './redeploy.ts';
import { imageServerTraffic, type Traffic } from './traffic.ts';

const run$ = promisify(execFile);
/** How long the image server stays stopped: past the agents' 60 s read timeout, so that breaks happen. */
export const STALL_S = 90;
const MSGS = {
  broke: 'image download broke, resuming',
  resumeFailed: 'resume request failed',
  restarted: 'image transfer failed, starting again from byte zero',
  unanswered: 'Image download request failed',
};

export interface StallOutcome {
  victim: string;
  /** Agents the stopped server was sending to when it stopped. */
  midTransfer: string[];
  stalledS: number;
  activeDirectly: number;
  deployFailed: { name: string; error: string | null }[];
  redeployed: number;
  /** From the agents' logs: downloads that broke and resumed, resume requests that failed, transfers begun again. */
  broke: number;
  resumeFailed: number;
  restarted: number;
  /** Requests that got no answer (or a failed one) and were asked again after the retry interval. */
  unanswered: number;
  /** The stopped server's log for the fault: requests, those with a Range, bytes. */
  victimTraffic: Traffic | undefined;
  /** Per-node deploy time, median and worst (s), of the nodes that went straight to `active`. */
  deployS: [number, number];
  failures: string[];
}

/**
 * The agents (aNN, from their 10.47.1.N address) an image server's nginx is sending to: connections with bytes in
 * the send queue (an idle keep-alive connection after a finished download has none).
 */
async function servedPeers(ns: string): Promise<string[]> {
  const { stdout } = await run$('ip', ['netns', 'exec', ns, 'ss', '-Htn', 'state', 'established', '( sport = :8080 )']);
  // with a state filter the columns are: Recv-Q Send-Q Local:Port Peer:Port
  return [...stdout.matchAll(/^\s*\d+\s+(\d+)\s+\S+\s+10\.47\.1\.(\d+):\d+/gm)]
    .filter((m) => Number(m[1]) > 0)
    .map((m) => `a${m[2]!.padStart(2, '0')}`);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor((xs.length - 1) / 2)] ?? Number.NaN;

export async function imageStall(opts: {
  ironic: IronicRest;
  run: string;
  /** The fleet's namespace prefix; the conductors' are <ns>-c1 and <ns>-c2. */
  ns: string;
  uuids: string[];
  deployArgs: (uuid: string) => Record<string, unknown>;
  prepare: (uuid: string) => Promise<void>;
  log: (msg: string) => void;
}): Promise<StallOutcome> {
  const { ironic, uuids, log } = opts;
  const failures: string[] = [];
  const trafficBefore = await imageServerTraffic(opts.run);
  const logsBefore = await agentMessages(opts.run, Object.values(MSGS));
  for (const uuid of uuids) await opts.prepare(uuid);
  const started = new Map<string, number>();
  for (const uuid of uuids) {
    await ironic.provision(uuid, 'active', opts.deployArgs(uuid));
    started.set(uuid, Date.now());
  }

  // the first conductor whose nginx is sending an image to an agent is the one that stalls
  let victim = '';
  let midTransfer: string[] = [];
  const deadline = Date.now() + 600_000;
  while (!victim && Date.now() < deadline) {
    for (const c of ['c1', 'c2']) {
      const peers = await servedPeers(`${opts.ns}-${c}`);
      if (peers.length > midTransfer.length) [victim, midTransfer] = [c, peers];
    }
    if (!victim) await sleep(200);
  }
  if (!victim) throw new Error('image stall: no image server sent an image within 600 s');
  const pid = Number((await readFile(join(opts.run, `nginx-${victim}`, 'nginx.pid'), 'utf8')).trim());
  process.kill(pid, 'SIGSTOP');
  const tStop = Date.now();
  log(
    `image stall: nginx of fleet-${victim} stopped (SIGSTOP) while sending to ${midTransfer.join(', ')}; ${STALL_S} s`,
  );
  try {
    await sleep(STALL_S * 1000);
  } finally {
    process.kill(pid, 'SIGCONT');
  }
  const stalledS = (Date.now() - tStop) / 1000;
  log(`image stall: nginx of fleet-${victim} answering again (SIGCONT) after ${stalledS.toFixed(0)} s`);

  const settled = await waitSettled({
    ironic,
    uuids,
    fault: 'image stall',
    since: tStop,
    after: 'the stall',
    failures,
    record: (uuid, s) => ({ ...s, ms: Date.now() - started.get(uuid)! }),
  });
  const { failed, redeployed } = await redeployFailed({ ...opts, settled, fault: 'image stall', failures });

  const logsAfter = await agentMessages(opts.run, Object.values(MSGS));
  const count = (msg: string) =>
    Object.entries(logsAfter).reduce((n, [a, c]) => n + c[msg]! - (logsBefore[a]?.[msg] ?? 0), 0);
  const victimTraffic = (await imageServerTraffic(opts.run, trafficBefore)).find((t) => t.server === victim);
  const direct = [...settled.values()].filter((s) => s.state === 'active').map((s) => s.ms / 1000);
  if (midTransfer.length === 0) failures.push('image stall: the server was stopped with no transfer under way');
  return {
    victim: `fleet-${victim}`,
    midTransfer,
    stalledS,
    activeDirectly: settled.size - failed.length,
    deployFailed: failed.map(([, s]) => ({ name: s.name, error: s.error })),
    redeployed,
    broke: count(MSGS.broke),
    resumeFailed: count(MSGS.resumeFailed),
    restarted: count(MSGS.restarted),
    unanswered: count(MSGS.unanswered),
    victimTraffic,
    deployS: [median(direct), Math.max(0, ...direct)],
    failures,
  };
}
