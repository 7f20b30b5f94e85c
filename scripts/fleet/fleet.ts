// One wave of the fleet (run.sh starts the stack and runs this in the ctl namespace): FLEET_NODES agents, the
// shipped bundle as the ramdisk starts it, each in the namespace run.sh made for it (a<I>, 10.47.1.<I>) with
// its own sparse loop device as its only allowed disk; enrolled, cleaned (manage, provide), one node deployed
// and undeployed alone, then all deployed at once and all undeployed at once (metadata cleaning). Prints the
// wave's report; exits 1 when a node failed or an image server restarted a download.
import { type ChildProcess, spawn } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, openSync } from 'node:fs';
import { appendFile, mkdir, readdir, readFile, readlink, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { imagePayloadOnDisk, readConfigDrive } from '../../test/ironic/support/disk-checks.ts';
import type { BuiltImage } from '../../test/ironic/support/images.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../../test/helpers/loop.ts';
import { makeDiskImage, toQcow2 } from '../../test/helpers/make-image.ts';
import { shippedLaunch } from '../lib/shipped-launch.ts';
import { conductorLoss, type LossOutcome } from './conductor-loss.ts';
import { heartbeats, type Heartbeats } from './heartbeats.ts';
import { imageStall, type StallOutcome } from './image-stall.ts';
import { lockConflict, type LockOutcome } from './lock-conflict.ts';
import { IronicRest, type FleetNode } from './ironic-rest.ts';
import { imageServerTraffic, type Traffic } from './traffic.ts';

const REPO = join(import.meta.dirname, '../..');
const RUN = must('RUN');
const NS = must('FLEET_NS');
const N = Number(process.env.FLEET_NODES ?? 4);
const FORCE_RAW = must('FLEET_FORCE_RAW') === 'true';
const IMAGE_MIB = Number(process.env.FLEET_IMAGE_MIB ?? 64);
const DISK_BYTES = 256 * MiB;
const API = 'http://10.47.0.10:6385';
const SOURCE = 'http://10.47.0.10:8080';
const CONDUCTORS = ['fleet-c1', 'fleet-c2'];
/** FLEET_FAULTS: faults to inject after the wave, run in this order: lock-conflict, image-stall, conductor-loss. */
const FAULTS = (process.env.FLEET_FAULTS ?? '').split(/[\s,]+/).filter(Boolean);

function must(name: string): string {
  const v = process.env[name];
  if (!v) throw new Error(`fleet.ts: ${name} is not set (run it through scripts/fleet/run.sh)`);
  return v;
}

/** An error a probe must not retry. */
function fleetError(msg: string): Error {
  const e = new Error(msg);
  e.name = 'FleetError';
  return e;
}

const log = (msg: string) => process.stderr.write(`fleet: ${msg}\n`);
const ironic = new IronicRest(API);

interface Agent {
  index: number;
  name: string;
  mac: string;
  disk: LoopDevice;
  child: ChildProcess;
  logFile: string;
  peakRssKiB: number;
  uuid: string;
}

async function waitUntil<T>(what: string, timeoutMs: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe().catch((err: Error) => {
      if (err.name === 'FleetError') throw err;
      return undefined;
    });
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`${what}: not within ${timeoutMs / 1000} s`);
    await sleep(500);
  }
}

/** The agent's high-water RSS so far (VmHWM), read while it still runs. */
async function peakRss(pid: number | undefined): Promise<number> {
  if (pid === undefined) return 0;
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
  return Number(/^VmHWM:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
}

/**
 * Resident memory of every process in the fleet's namespaces together (MariaDB, nginx, the Ironic daemons and
 * their workers, the agents, this driver), KiB: the machine is shared, so its own total would count others' work.
 */
async function fleetRssKiB(): Promise<number> {
  const nets = new Set<string>();
  for (const name of await readdir('/run/netns'))
    if (name.startsWith(`${NS}-`)) nets.add(`net:[${(await stat(join('/run/netns', name))).ino}]`);
  let total = 0;
  for (const pid of await readdir('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    const net = await readlink(`/proc/${pid}/ns/net`).catch(() => '');
    if (!nets.has(net)) continue;
    const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => '');
    total += Number(/^VmRSS:\s+(\d+) kB/m.exec(status)?.[1] ?? 0);
  }
  return total;
}

/**
 * Starts agent `index` (a fresh boot of its node's ramdisk): on a new loop device, or on `disk` when the node boots
 * again; `extra` adds flags (kernel parameters) to the usual ones.
 */
async function startAgent(
  index: number,
  bundle: string,
  boot: { disk?: LoopDevice; extra?: Record<string, string> } = {},
): Promise<Omit<Agent, 'uuid'>> {
  const name = `a${String(index).padStart(2, '0')}`;
  const mac = `52:54:00:47:01:${index.toString(16).padStart(2, '0')}`;
  const ip = `10.47.1.${index}`;
  const dir = join(RUN, 'agents', name);
  await mkdir(dir, { recursive: true });
  let disk = boot.disk;
  if (!disk) {
    disk = await attachLoop(DISK_BYTES);
    await appendFile(join(RUN, 'loops'), `${disk.path} ${disk.file}\n`);
  }
  // an empty kernel command line: every setting below is a flag, as in test/ironic
  await writeFile(join(dir, 'cmdline'), '\n');
  const launch = await shippedLaunch(REPO);
  const logFile = join(dir, 'agent.log');
  // what the agent says before its log file is open (a bad flag, a missing addon) goes to its stdout file
  const out = openSync(join(dir, 'stdout'), 'a');
  const flags = {
    'kernel-cmdline': join(dir, 'cmdline'),
    'status-file': join(dir, 'status.json'),
    'log-file': logFile,
    'ipa-api-url': API,
    'device-allowlist': disk.path,
    'ipa-listen-host': ip,
    'ipa-advertise-host': ip,
    'ipa-enable-auto-tls': 'true',
    'ipa-debug': 'true',
    ...boot.extra,
  };
  const child = spawn(
    'ip',
    [
      'netns',
      'exec',
      `${NS}-${name}`,
      'env',
      ...Object.entries(launch.env).map(([k, v]) => `${k}=${v}`),
      process.execPath,
      ...launch.flags,
      join(bundle, 'agent.cjs'),
      ...Object.entries(flags).map(([k, v]) => `--${k}=${v}`),
    ],
    { cwd: dir, stdio: ['ignore', out, out] },
  );
  closeSync(out);
  return { index, name, mac, disk, child, logFile, peakRssKiB: 0 };
}

/**
 * The node reboots into its ramdisk: the agent process ends and a new one starts on the same disk, with nothing
 * carried over (a ramdisk's files do not survive a reboot: the status file goes too).
 */
async function rebootAgent(a: Agent, extra: Record<string, string>): Promise<void> {
  a.peakRssKiB = Math.max(a.peakRssKiB, await peakRss(a.child.pid));
  await stopAgent(a);
  await rm(join(RUN, 'agents', a.name, 'status.json'), { force: true });
  const fresh = await startAgent(a.index, join(RUN, 'bundle'), { disk: a.disk, extra });
  a.child = fresh.child;
}

/** The agent's process has ended (its exit already seen). */
const gone = (a: Agent) => a.child.exitCode !== null || a.child.signalCode !== null;

async function stopAgent(a: Agent): Promise<void> {
  if (gone(a)) return;
  a.child.kill('SIGTERM');
  const done = new Promise((r) => a.child.once('exit', r));
  if ((await Promise.race([done, sleep(5000, 'late')])) === 'late') a.child.kill('SIGKILL');
  await done;
}

function configDrive(a: Agent) {
  return {
    meta_data: { uuid: a.uuid, hostname: `fleet-${a.name}` },
    user_data: `#cloud-config\nruncmd:\n - echo fleet-${a.name}\n`,
    network_data: { links: [], networks: [], services: [] },
  };
}

interface Outcome {
  ms: number;
  node: FleetNode;
}

/** Drives every node to `target` at once (each request sent as soon as the last returned) and waits for all. */
async function driveAll(
  agents: Agent[],
  verb: string,
  target: string,
  extra: (a: Agent) => Record<string, unknown>,
  timeoutMs: number,
): Promise<{ wallMs: number; outcomes: Map<string, Outcome>; failures: string[] }> {
  const t0 = Date.now();
  const started = new Map<string, number>();
  for (const a of agents) {
    await ironic.provision(a.uuid, verb, extra(a));
    started.set(a.uuid, Date.now());
  }
  const outcomes = new Map<string, Outcome>();
  const failures: string[] = [];
  const deadline = t0 + timeoutMs;
  while (outcomes.size + failures.length < agents.length) {
    const nodes = await ironic.nodes();
    for (const node of nodes) {
      const since = started.get(node.uuid);
      if (since === undefined || outcomes.has(node.uuid) || failures.some((f) => f.startsWith(node.name))) continue;
      if (node.provision_state === target && node.target_provision_state === null)
        outcomes.set(node.uuid, { ms: Date.now() - since, node });
      else if (/failed$|^error$/.test(node.provision_state))
        failures.push(`${node.name}: ${node.provision_state}: ${node.last_error}`);
    }
    if (Date.now() > deadline) {
      for (const n of nodes)
        if (started.has(n.uuid) && !outcomes.has(n.uuid) && !failures.some((f) => f.startsWith(n.name)))
          failures.push(
            `${n.name}: still ${n.provision_state} -> ${n.target_provision_state} after ${timeoutMs / 1000} s`,
          );
      break;
    }
    for (const a of agents) a.peakRssKiB = Math.max(a.peakRssKiB, await peakRss(a.child.pid));
    await sleep(1000);
  }
  return { wallMs: Date.now() - t0, outcomes, failures };
}

async function buildImage(): Promise<{ raw: BuiltImage; qcow2Name: string; qcow2Sha256: string; qcow2Bytes: number }> {
  const dir = join(RUN, 'source');
  await mkdir(dir, { recursive: true });
  const img = await makeDiskImage(dir, { sizeMiB: IMAGE_MIB, name: 'fleet.raw', randomKiB: (IMAGE_MIB / 2) * 1024 });
  const qcow2 = await toQcow2(img.path, join(dir, 'fleet.qcow2'));
  const data = await readFile(qcow2);
  const rawData = await readFile(img.path);
  const sha = (b: Buffer, algo = 'sha256') => createHash(algo).update(b).digest('hex');
  return {
    raw: {
      name: 'fleet.raw',
      file: img.path,
      marker: img.marker,
      sha256: sha(rawData),
      md5: sha(rawData, 'md5'),
      root: img.partition,
    },
    qcow2Name: 'fleet.qcow2',
    qcow2Sha256: sha(data),
    qcow2Bytes: data.length,
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
};
const secs = (ms: number) => `${(ms / 1000).toFixed(1)} s`;
/** "N x 64.0 MiB", or "N files, 33.1-64.0 MiB each" when they differ. */
const perFile = (bytes: number[]) => {
  if (bytes.length === 0) return '-';
  const lo = Math.min(...bytes);
  const hi = Math.max(...bytes);
  return lo === hi ? `${bytes.length} x ${mib(lo)}` : `${bytes.length} files, ${mib(lo)}-${mib(hi)} each`;
};
const mib = (bytes: number) => `${(bytes / MiB).toFixed(1)} MiB`;

async function main(): Promise<number> {
  const tStart = Date.now();
  let memPeak = 0;
  let sampling = false;
  const memTimer = setInterval(() => {
    if (sampling) return;
    sampling = true;
    void fleetRssKiB()
      .then((m) => {
        memPeak = Math.max(memPeak, m);
      })
      .finally(() => {
        sampling = false;
      });
  }, 2000);
  const agents: Agent[] = [];
  try {
    log(`building the ${IMAGE_MIB} MiB image (qcow2 served by the source at ${SOURCE})`);
    const image = await buildImage();
    await waitUntil('both conductors registered with the API', 180_000, async () => {
      const { conductors } = await ironic.call<{ conductors: { hostname: string; alive: boolean }[] }>(
        'GET',
        '/v1/conductors',
      );
      const alive = conductors.filter((c) => c.alive).map((c) => c.hostname);
      return CONDUCTORS.every((c) => alive.includes(c)) ? alive : undefined;
    });
    log(`API and conductors ${CONDUCTORS.join(', ')} up after ${secs(Date.now() - tStart)}`);

    for (let i = 1; i <= N; i++) agents.push({ ...(await startAgent(i, join(RUN, 'bundle'))), uuid: '' });
    for (const a of agents) {
      const node = await ironic.call<FleetNode>('POST', '/v1/nodes', {
        name: `fleet-${a.name}`,
        driver: 'fake-hardware',
        deploy_interface: 'direct',
        boot_interface: 'fake',
        power_interface: 'fake',
        management_interface: 'noop',
        // in-band inspection, used by the lock-conflict fault only
        inspect_interface: 'agent',
        network_interface: 'noop',
        properties: { cpu_arch: 'x86_64', root_device: { name: a.disk.path } },
      });
      a.uuid = node.uuid;
      await ironic.call('POST', '/v1/ports', { node_uuid: a.uuid, address: a.mac });
      // fake power starts as None; fast track needs the node "on"
      await ironic.call('PUT', `/v1/nodes/${a.uuid}/states/power`, { target: 'power on' });
    }
    log(`${N} nodes enrolled; waiting for every agent's first heartbeat`);
    await waitUntil('every agent heartbeating', 300_000, async () => {
      for (const a of agents) {
        if (gone(a))
          throw fleetError(
            `agent ${a.name} exited: ${(await readFile(join(a.logFile, '../stdout'), 'utf8')).slice(-800)}`,
          );
        const n = await ironic.node(a.uuid);
        if (!n.driver_internal_info.agent_url) return undefined;
      }
      return true;
    });

    const failures: string[] = [];
    const managed = await driveAll(agents, 'manage', 'manageable', () => ({}), 300_000);
    failures.push(...managed.failures);
    const provided = await driveAll(agents, 'provide', 'available', () => ({}), 900_000);
    failures.push(...provided.failures);
    if (failures.length > 0) throw new Error(`enrollment failed:\n${failures.join('\n')}`);
    log(`all ${N} nodes available (first cleaning took ${secs(provided.wallMs)})`);

    const instanceInfo = [
      { op: 'add', path: '/instance_info/image_source', value: `${SOURCE}/${image.qcow2Name}` },
      { op: 'add', path: '/instance_info/image_disk_format', value: 'qcow2' },
      { op: 'add', path: '/instance_info/image_os_hash_algo', value: 'sha256' },
      { op: 'add', path: '/instance_info/image_os_hash_value', value: image.qcow2Sha256 },
    ];
    for (const a of agents) await ironic.patch(a.uuid, instanceInfo);
    const deployArgs = (a: Agent) => ({ configdrive: configDrive(a) });

    const first = agents[0]!;
    const alone = await driveAll([first], 'active', 'active', deployArgs, 600_000);
    const aloneUndeploy = await driveAll([first], 'deleted', 'available', () => ({}), 600_000);
    failures.push(...alone.failures, ...aloneUndeploy.failures);
    log(`one node alone: deployed in ${secs(alone.wallMs)}, undeployed in ${secs(aloneUndeploy.wallMs)}`);
    await ironic.patch(first.uuid, instanceInfo);
    const trafficBefore = await imageServerTraffic(RUN);

    const wave = await driveAll(agents, 'active', 'active', deployArgs, 1_800_000);
    failures.push(...wave.failures);
    log(`wave of ${N}: ${wave.outcomes.size} active, ${wave.failures.length} failed, in ${secs(wave.wallMs)}`);
    const owners = new Map<string, number>();
    for (const uuid of wave.outcomes.keys()) {
      // the node list cannot show `conductor`; each node can
      const owner = (await ironic.node(uuid)).conductor ?? '?';
      owners.set(owner, (owners.get(owner) ?? 0) + 1);
    }
    let checked = 0;
    for (const a of agents) {
      if (!wave.outcomes.has(a.uuid)) continue;
      const payload = await imagePayloadOnDisk(a.disk.path, image.raw);
      const cd = await readConfigDrive(a.disk.path);
      if (!payload.bytesMatch || payload.marker !== image.raw.marker)
        failures.push(`${a.name}: active, but the image's root partition on ${a.disk.path} differs from the image`);
      else if (cd?.metaData.hostname !== `fleet-${a.name}`)
        failures.push(`${a.name}: active, but no config-2 partition with its own meta_data on ${a.disk.path}`);
      else checked++;
    }
    const traffic = await imageServerTraffic(RUN, trafficBefore);
    const trafficAll = await imageServerTraffic(RUN);
    const undeploy = await driveAll(agents, 'deleted', 'available', () => ({}), 1_800_000);
    failures.push(...undeploy.failures);
    log(`undeploy of ${N}: ${undeploy.outcomes.size} available in ${secs(undeploy.wallMs)}`);
    for (const a of agents) a.peakRssKiB = Math.max(a.peakRssKiB, await peakRss(a.child.pid));

    const byUuid = new Map(agents.map((a) => [a.uuid, a]));
    const uuids = agents.map((a) => a.uuid);
    let lock: LockOutcome | undefined;
    if (FAULTS.includes('lock-conflict')) {
      lock = await lockConflict({
        ironic,
        run: RUN,
        uuids,
        powerOff: async (uuid) => {
          const a = byUuid.get(uuid)!;
          a.peakRssKiB = Math.max(a.peakRssKiB, await peakRss(a.child.pid));
          await stopAgent(a);
        },
        bootInspection: (uuid) =>
          rebootAgent(byUuid.get(uuid)!, { 'ipa-inspection-callback-url': `${API}/v1/continue_inspection` }),
        drive: async (group, verb, target) => {
          const picked = group.map((u) => byUuid.get(u)!);
          if (verb === 'active') for (const a of picked) await ironic.patch(a.uuid, instanceInfo);
          const r = await driveAll(picked, verb, target, verb === 'active' ? deployArgs : () => ({}), 1_800_000);
          return { failures: r.failures, wallMs: r.wallMs };
        },
        log,
      });
      failures.push(...lock.failures);
    }
    let stall: StallOutcome | undefined;
    if (FAULTS.includes('image-stall')) {
      stall = await imageStall({
        ironic,
        run: RUN,
        ns: NS,
        uuids,
        deployArgs: (uuid) => deployArgs(byUuid.get(uuid)!),
        prepare: (uuid) => ironic.patch(uuid, instanceInfo),
        log,
      });
      failures.push(...stall.failures);
      const after = await driveAll(agents, 'deleted', 'available', () => ({}), 1_800_000);
      failures.push(...after.failures);
      log(`image stall: undeploy: ${after.outcomes.size} available in ${secs(after.wallMs)}`);
    }
    for (const a of agents) a.peakRssKiB = Math.max(a.peakRssKiB, await peakRss(a.child.pid));
    let loss: LossOutcome | undefined;
    if (FAULTS.includes('conductor-loss')) {
      loss = await conductorLoss({
        ironic,
        run: RUN,
        uuids,
        conductors: [CONDUCTORS[0]!, CONDUCTORS[1]!],
        deployArgs: (uuid) => deployArgs(byUuid.get(uuid)!),
        prepare: (uuid) => ironic.patch(uuid, instanceInfo),
        log,
      });
      failures.push(...loss.failures);
      const after = await driveAll(agents, 'deleted', 'available', () => ({}), 1_800_000);
      failures.push(...after.failures);
      log(`conductor loss: undeploy by the survivor: ${after.outcomes.size} available in ${secs(after.wallMs)}`);
    }

    const report = renderReport({
      beats: await heartbeats(RUN),
      lock,
      stall,
      loss,
      image,
      alone: alone.outcomes.get(first.uuid)?.ms ?? Number.NaN,
      aloneUndeploy: aloneUndeploy.wallMs,
      wave,
      undeploy,
      checked,
      owners,
      traffic,
      trafficAll,
      agents,
      failures,
      memPeakMiB: memPeak / 1024,
      totalMs: Date.now() - tStart,
    });
    process.stdout.write(report);
    if (process.env.FLEET_REPORT) await appendFile(process.env.FLEET_REPORT, report);
    return failures.length === 0 && traffic.every((t) => t.restarts === 0) ? 0 : 1;
  } finally {
    clearInterval(memTimer);
    for (const a of agents) await stopAgent(a).catch(() => undefined);
    for (const a of agents) await detachLoop(a.disk).catch((e: Error) => log(e.message));
  }
}

function renderReport(r: {
  beats: Heartbeats;
  lock: LockOutcome | undefined;
  stall: StallOutcome | undefined;
  loss: LossOutcome | undefined;
  image: Awaited<ReturnType<typeof buildImage>>;
  alone: number;
  aloneUndeploy: number;
  wave: Awaited<ReturnType<typeof driveAll>>;
  undeploy: Awaited<ReturnType<typeof driveAll>>;
  checked: number;
  owners: Map<string, number>;
  traffic: Traffic[];
  trafficAll: Traffic[];
  agents: Agent[];
  failures: string[];
  memPeakMiB: number;
  totalMs: number;
}): string {
  const times = [...r.wave.outcomes.values()].map((o) => o.ms);
  const undeployTimes = [...r.undeploy.outcomes.values()].map((o) => o.ms);
  const rss = r.agents.map((a) => a.peakRssKiB / 1024);
  const lines = [
    '',
    `## Fleet wave: ${N} nodes, force_raw_images=${FORCE_RAW}, image_download_source=local (${new Date().toISOString()})`,
    '',
    `Image: ${IMAGE_MIB} MiB raw GPT disk, qcow2 of ${mib(r.image.qcow2Bytes)} at ${SOURCE}/${r.image.qcow2Name}`,
    '',
    '| figure | value |',
    '| --- | --- |',
    `| one node alone: deploy / undeploy | ${secs(r.alone)} / ${secs(r.aloneUndeploy)} |`,
    `| wave deploy: wall time | ${secs(r.wave.wallMs)} (${(r.wave.wallMs / r.alone).toFixed(1)}x one node) |`,
    `| per-node deploy: median / worst | ${secs(median(times))} / ${secs(Math.max(0, ...times))} |`,
    `| nodes active, image and config drive checked on disk | ${r.wave.outcomes.size} / ${r.checked} of ${N} |`,
    `| nodes per conductor | ${[...r.owners].map(([c, n]) => `${c}: ${n}`).join(', ')} |`,
    `| wave undeploy (metadata cleaning): wall / median / worst | ${secs(r.undeploy.wallMs)} / ${secs(median(undeployTimes))} / ${secs(Math.max(0, ...undeployTimes))} |`,
    `| agents' peak RSS (VmHWM): median / worst | ${median(rss).toFixed(1)} MiB / ${Math.max(0, ...rss).toFixed(1)} MiB |`,
    `| all fleet processes' RSS together, peak (2 s samples) | ${r.memPeakMiB.toFixed(0)} MiB |`,
    `| the whole wave (start to report) | ${secs(r.totalMs)} |`,
    `| heartbeats the API answered, by status (whole wave) | ${Object.entries(r.beats.byStatus)
      .map(([k, v]) => `${k}: ${v}`)
      .join(', ')} |`,
    `| agents' log: heartbeat conflicts (409, retried) / other heartbeat failures | ${r.beats.agentConflicts} / ${r.beats.agentFailures} |`,
    `| failures | ${r.failures.length} |`,
    '',
    '| image server | wave deploy: requests | ranged | bytes sent | per file asked for | restarts from zero | whole run: bytes sent |',
    '| --- | --- | --- | --- | --- | --- | --- |',
    ...r.traffic.map(
      (t) =>
        `| ${t.server} | ${t.requests} | ${t.ranged} | ${mib(t.bytes)} | ${perFile(t.perNode)} | ${t.restarts} | ${mib(r.trafficAll.find((a) => a.server === t.server)?.bytes ?? 0)} |`,
    ),
    '',
    ...(r.lock ? lockReport(r.lock) : []),
    ...(r.stall ? stallReport(r.stall) : []),
    ...(r.loss
      ? [
          `Conductor loss: ${r.loss.killed} killed (SIGKILL) holding ${r.loss.orphaned} node(s) mid-deploy; ` +
            `its nodes taken over by ${r.loss.survivor} after ${r.loss.takeoverS.toFixed(0)} s; ${r.loss.activeDirectly} node(s) ended active ` +
            `directly, ${r.loss.deployFailed.length} in deploy failed, ${r.loss.redeployed} of those redeployed to active.`,
          ...[...new Set(r.loss.deployFailed.map((f) => f.error))].map((e) => `- deploy failed with: ${e}`),
          '',
        ]
      : []),
    ...r.failures.map((f) => `FAILURE ${f}`),
    '',
  ];
  return lines.join('\n');
}

const statuses = (m: Record<string, number>) =>
  Object.entries(m)
    .map(([k, v]) => `${k}: ${v}`)
    .join(', ') || 'none';

function lockReport(l: LockOutcome): string[] {
  return [
    `Lock conflict: ${l.nodes} node(s) inspected at once under an inspection rule whose api-call waits ${l.holdS} s for ` +
      `the inventory service (${l.hookCalls} call(s)), holding each node's lock after its agent got the token.`,
    `- heartbeats in the fault, by the API's status: ${statuses(l.beats.byStatus)}; lookups: ${statuses(l.beats.lookups)}`,
    `- agents' "heartbeat conflict" (409, retried 5-10 s later): ${l.beats.agentConflicts}, on ${l.agentsConflicted} of ${l.nodes} agents (at most ${l.maxPerAgent} on one)`,
    `- agent boot to manageable with agent_url recorded: median ${l.inspectS[0].toFixed(1)} s, worst ${l.inspectS[1].toFixed(1)} s`,
    `- then the same agents cleaned, deployed all to active in ${l.deployS.toFixed(1)} s and undeployed in ${l.undeployS.toFixed(1)} s`,
    '',
  ];
}

function stallReport(s: StallOutcome): string[] {
  const t = s.victimTraffic;
  return [
    `Image stall: nginx of ${s.victim} stopped (SIGSTOP) for ${s.stalledS.toFixed(0)} s while sending to ${s.midTransfer.length} agent(s) ` +
      `(${s.midTransfer.join(', ')}); ${s.activeDirectly} node(s) ended active directly (per-node deploy median ${s.deployS[0].toFixed(1)} s, ` +
      `worst ${s.deployS[1].toFixed(1)} s), ${s.deployFailed.length} in deploy failed, ${s.redeployed} of those redeployed to active.`,
    `- agents' logs: ${s.broke} download(s) broke and resumed with Range, ${s.resumeFailed} resume request(s) failed and were retried, ` +
      `${s.unanswered} request(s) unanswered for 60 s and asked again, ${s.restarted} transfer(s) begun again from byte zero`,
    `- ${s.victim}'s nginx during the fault: ${t?.requests ?? 0} request(s), ${t?.ranged ?? 0} with a Range, ${mib(t?.bytes ?? 0)} sent`,
    ...[...new Set(s.deployFailed.map((f) => f.error))].map((e) => `- deploy failed with: ${e}`),
    '',
  ];
}

main().then(
  (code) => process.exit(code),
  (err: Error) => {
    log(`FAILED: ${err.stack ?? err.message}`);
    process.exit(1);
  },
);
