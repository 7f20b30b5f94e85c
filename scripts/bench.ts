// `npm run bench`: how fast the agent deploys compared with the plain tools, on this machine. One raw
// image (BENCH_SIZE, default 2G) served over loopback HTTP, written to a sparse loop device, each case
// BENCH_REPS times (default 3) after BENCH_WARMUP uncounted passes (default 1); prints the medians, the
// ratios to the baselines, the CPU time each case used (all its processes; the image server excepted) and
// the agent's peak RSS per case (VmHWM of the agent process, its threads included; the tools it starts,
// such as qemu-img or zstd, listed apart). The agent runs as its own process (bundled and started as in
// the ramdisk), standalone, limited to the loop device; its time is from the POST to the final result,
// follow-up commands included.
// BENCH_BEFORE=DIR adds the agent of another checkout (e.g. the commit before the runtime switch, made by
// scripts/bench-before-after.sh) to every agent case, bundled by that checkout's esbuild and run by
// BENCH_BEFORE_NODE (default /usr/bin/node, the host's), on the same images in the same repetitions.
// BENCH_NODE_FLAGS replaces the node flags the ramdisk starts the agent with (image-build's run-agent), to
// measure what they cost or save, e.g. BENCH_NODE_FLAGS='' or '--max-semi-space-size=1'.
// The images are served by Debian's nginx with sendfile (scripts/lib/nginx-files.ts), as a conductor's
// http_root usually is; BENCH_SERVER=node takes the tests' Node helper in this process instead, which spends
// about a core-second per GiB of the two cores the agent is measured on (the figures before 2026-12-06 used it;
// docs/decisions.md).
// A whole run writes docs/bench-results.md (commit, date, machine, settings, the summary); BENCH_RESULTS=PATH
// writes elsewhere (empty: nowhere). Not a test: no pass/fail.
import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { execa } from 'execa';
import { attachLoop, detachLoop, GiB, MiB, type LoopDevice } from '../test/helpers/loop.ts';
import { startImageServer, type ImageServer } from '../test/helpers/image-server.ts';
import { compress, toQcow2, workDir } from '../test/helpers/make-image.ts';
import { startNginx, type FileServer } from './lib/nginx-files.ts';
import { shippedLaunch, type Launch } from './lib/shipped-launch.ts';
import { standaloneArgs } from './lib/standalone-args.ts';

const root = new URL('..', import.meta.url).pathname;

function parseSize(text: string): number {
  const m = /^(\d+)([MG])$/i.exec(text.trim());
  if (!m) throw new Error(`BENCH_SIZE must look like 256M or 2G, got ${text}`);
  return Number(m[1]) * (m[2]!.toUpperCase() === 'G' ? GiB : MiB);
}

const SIZE = parseSize(process.env.BENCH_SIZE ?? '2G');
const REPS = Number(process.env.BENCH_REPS ?? 3);
// Checked before the images are built, which takes minutes.
const SERVER = process.env.BENCH_SERVER ?? 'nginx';
if (SERVER !== 'nginx' && SERVER !== 'node')
  throw new Error(`BENCH_SERVER=${SERVER}: the bench serves images with nginx (the default) or node`);
/**
 * Uncounted passes over every case first. This VM reports freed memory back to its host (free page
 * reporting), so a pass that fills fresh memory makes the host fault it in again: the first pass of the cases
 * that fill tmpfs ran much slower than later ones, which no bare-metal ramdisk sees (docs/performance.md).
 */
const WARMUP = Number(process.env.BENCH_WARMUP ?? 1);
const SETTLE_MS = 3000;

/** Half incompressible data, half zeros, in 64 MiB stripes, with a GPT so the agent's partition check passes. */
async function buildImage(path: string): Promise<void> {
  const stripe = randomBytes(64 * MiB);
  await execa('truncate', ['-s', String(SIZE), path]);
  const fh = await open(path, 'r+');
  try {
    for (let at = 0; at < SIZE; at += 2 * stripe.length) {
      await fh.write(stripe, 0, Math.min(stripe.length, SIZE - at), at);
    }
  } finally {
    await fh.close();
  }
  await execa('sgdisk', ['-n', '1:2048:0', '-t', '1:8300', path]);
}

async function sha(path: string, algo: string): Promise<string> {
  const hash = createHash(algo);
  for await (const chunk of createReadStream(path, { highWaterMark: 8 * MiB })) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/**
 * Lets the previous case's writes drain before the next starts. Without the pause, whichever case ran first
 * in a group paid for its predecessor (the same qcow2 baseline took 3.8 s or 5.4–6.7 s by its place).
 */
async function settle(): Promise<void> {
  await execa('sync');
  await sleep(SETTLE_MS);
}

interface Run {
  seconds: number;
  /** CPU time of every process involved (user + system, children included), the image server excepted. */
  cpuSeconds: number;
  /** Seconds per phase: a baseline's steps by their command, the agent's from its log ("image download took …"). */
  phases: Map<string, number>;
}

interface AgentRun extends Run {
  idleRssBytes: number;
  peakRssBytes: number;
  /** Peak RSS of the processes the agent started, by name. */
  childPeaks: Map<string, number>;
  /** Peak of the agent's RSS plus its children's, sampled together. */
  treePeakBytes: number;
  /** Peak size of the files in the buffer directory (tmpfs: RAM). */
  bufferPeakBytes: number;
}

/** A baseline: shell commands run one after the other, each timed; bash's `times` gives the CPU they used. */
async function baseline(...steps: string[]): Promise<Run> {
  await execa('sync');
  const timed = steps.map((step) => `t=$(date +%s%N); ${step}; echo "step $(( $(date +%s%N) - t ))"`);
  const start = process.hrtime.bigint();
  const { stdout } = await execa('bash', ['-c', `set -e -o pipefail\n${timed.join('\n')}\ntimes`]);
  const seconds = Number(process.hrtime.bigint() - start) / 1e9;
  const lines = stdout.trim().split('\n');
  const cpuSeconds = [...lines.at(-1)!.matchAll(/(\d+)m([\d.]+)s/g)].reduce(
    (sum, m) => sum + Number(m[1]) * 60 + Number(m[2]),
    0,
  );
  const phases = new Map<string, number>();
  for (const [i, l] of lines.filter((x) => x.startsWith('step ')).entries())
    phases.set(steps[i]!.split(' ')[0]!, Number(l.slice(5)) / 1e9);
  return { seconds, cpuSeconds, phases };
}

async function rss(pid: number, field: 'VmRSS' | 'VmHWM'): Promise<number> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8');
  return Number(new RegExp(`${field}:\\s+(\\d+) kB`).exec(status)?.[1] ?? 0) * 1024;
}

/** utime + stime + cutime + cstime of a live process, in seconds (clock ticks are 1/100 s on Linux). */
async function cpuTime(pid: number): Promise<number> {
  const stat = await readFile(`/proc/${pid}/stat`, 'utf8');
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return fields.slice(11, 15).reduce((sum, f) => sum + Number(f), 0) / 100;
}

/**
 * The agent as the ramdisk ships it: the tree's own scripts/bundle.sh (or, in a tree from before it, the esbuild
 * command its image-build/build.sh ran), with the hashing addon beside it when the tree has one, each agent in a
 * directory of its own. Returns the bundle's path.
 */
async function bundleAgent(dir: string, tree = root, target = 'node24'): Promise<string> {
  await mkdir(dir, { recursive: true });
  const addonScript = join(tree, 'scripts/build-addon.sh');
  if (existsSync(addonScript)) await execa('bash', [addonScript, join(dir, 'hash-addon.node')]);
  if (existsSync(join(tree, 'scripts/bundle.sh'))) {
    await execa('bash', [join(tree, 'scripts/bundle.sh'), dir, 'bench']);
    return join(dir, 'agent.cjs');
  }
  const banner =
    "import { createRequire as __inaRequire } from 'node:module'; const require = __inaRequire(import.meta.url);";
  await execa(
    join(tree, 'node_modules/.bin/esbuild'),
    [
      'agent/main.ts',
      '--bundle',
      '--platform=node',
      '--format=esm',
      `--target=${target}`,
      '--define:__AGENT_VERSION__="bench"',
      `--banner:js=${banner}`,
      '--legal-comments=none',
      '--minify-whitespace',
      '--log-level=warning',
      `--outfile=${join(dir, 'agent.mjs')}`,
    ],
    { cwd: tree },
  );
  return join(dir, 'agent.mjs');
}

/** Which agent a case runs: this tree's, or BENCH_BEFORE's on its own Node. */
interface AgentBuild {
  node: string;
  bundle: string;
  launch: Launch;
}
let current: AgentBuild;
let before: AgentBuild | undefined;

/** How the ramdisk starts the agent, with BENCH_NODE_FLAGS in place of its node flags when set. */
async function launchOf(tree = root): Promise<Launch> {
  const shipped = await shippedLaunch(tree);
  const chosen = process.env.BENCH_NODE_FLAGS;
  return chosen === undefined ? shipped : { ...shipped, flags: chosen.split(' ').filter(Boolean) };
}

/** Bytes the files in `dir` take (their blocks: a sparse file counts what it holds). */
async function dirBytes(dir: string): Promise<number> {
  const names = await readdir(dir).catch(() => [] as string[]);
  const sizes = await Promise.all(
    names.map((n) =>
      stat(join(dir, n)).then(
        (st) => st.blocks * 512,
        () => 0,
      ),
    ),
  );
  return sizes.reduce((a, b) => a + b, 0);
}

/**
 * The peak RSS of each process the agent starts while it runs, by command name (the largest when one
 * runs several times), of the agent and its children together, and of the buffer directory's files.
 * Sampled every 50 ms, so a tool that lives shorter than that may be missed.
 */
function watchChildren(
  pid: number,
  self: string,
  bufferDir: string,
): () => Promise<{ childPeaks: Map<string, number>; treePeakBytes: number; bufferPeakBytes: number }> {
  const peaks = new Map<string, number>();
  let treePeak = 0;
  let bufferPeak = 0;
  let running = true;
  const childrenOf = async (p: number): Promise<number[]> => {
    const tasks = await readdir(`/proc/${p}/task`).catch(() => [] as string[]);
    const lists = await Promise.all(
      tasks.map((t) => readFile(`/proc/${p}/task/${t}/children`, 'utf8').catch(() => '')),
    );
    const direct = lists.join(' ').split(/\s+/).filter(Boolean).map(Number);
    return [...direct, ...(await Promise.all(direct.map(childrenOf))).flat()];
  };
  const loop = (async () => {
    while (running) {
      let tree = await rss(pid, 'VmRSS').catch(() => 0);
      for (const child of await childrenOf(pid)) {
        const status = await readFile(`/proc/${child}/status`, 'utf8').catch(() => '');
        const name = /^Name:\s+(\S+)/m.exec(status)?.[1];
        const hwm = Number(/VmHWM:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
        // A child still named as the agent is caught between fork and exec: a copy, not a tool.
        if (name && name !== self && hwm) peaks.set(name, Math.max(peaks.get(name) ?? 0, hwm));
        if (name !== self) tree += Number(/VmRSS:\s+(\d+) kB/.exec(status)?.[1] ?? 0) * 1024;
      }
      treePeak = Math.max(treePeak, tree);
      bufferPeak = Math.max(bufferPeak, await dirBytes(bufferDir));
      await sleep(50);
    }
  })();
  return async () => {
    running = false;
    await loop;
    return { childPeaks: peaks, treePeakBytes: treePeak, bufferPeakBytes: bufferPeak };
  };
}

/** One deploy by a fresh agent process; returns its time, its phases and the process's peak RSS. */
async function agentDeploy(
  build: AgentBuild,
  device: string,
  bufferDir: string,
  imageInfo: Record<string, unknown>,
  flags: string[] = [],
): Promise<AgentRun> {
  const child = execa(
    build.node,
    [...build.launch.flags, build.bundle, ...standaloneArgs(device, bufferDir), ...flags],
    { cwd: root, reject: false, buffer: false, env: build.launch.env },
  );
  // Filled as the log comes; complete once the process has exited and its output has been read (finally).
  const phases = new Map<string, number>();
  try {
    const url = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (line.includes('"agent API listening"')) resolve(`http://127.0.0.1:${JSON.parse(line).port}`);
        if (!line.includes('"phase_s"')) return;
        const { phase, phase_s: s } = JSON.parse(line) as { phase: string; phase_s: number };
        phases.set(phase, (phases.get(phase) ?? 0) + s);
      });
      void child.then(() => reject(new Error('agent exited')));
    });
    const idleRssBytes = await rss(child.pid!, 'VmRSS');
    const idleCpu = await cpuTime(child.pid!);
    const children = watchChildren(
      child.pid!,
      /^Name:\s+(\S+)/m.exec(await readFile(`/proc/${child.pid}/status`, 'utf8'))?.[1] ?? '',
      bufferDir,
    );
    let seconds = 0;
    await execa('sync');
    const start = process.hrtime.bigint();
    const res = await fetch(`${url}/v1/commands/?wait=true`, {
      method: 'POST',
      body: JSON.stringify({ name: 'standby.prepare_image', group: 'raw', params: { image_info: imageInfo } }),
    });
    let cmd = (await res.json()) as { command_status: string; command_error: unknown };
    while (cmd.command_status === 'RUNNING') {
      await new Promise((r) => setTimeout(r, 20));
      cmd = ((await (await fetch(`${url}/v1/commands/`)).json()) as { commands: (typeof cmd)[] }).commands.at(-1)!;
    }
    seconds = Number(process.hrtime.bigint() - start) / 1e9;
    if (cmd.command_status !== 'SUCCEEDED')
      throw new Error(`agent deploy failed: ${JSON.stringify(cmd.command_error)}`);
    return {
      seconds,
      cpuSeconds: (await cpuTime(child.pid!)) - idleCpu,
      idleRssBytes,
      peakRssBytes: await rss(child.pid!, 'VmHWM'),
      ...(await children()),
      phases,
    };
  } finally {
    child.kill('SIGTERM');
    await child;
  }
}

/**
 * Where the results go: BENCH_RESULTS when set (empty: nowhere); otherwise docs/bench-results.md for a whole run
 * of this tree's agent as the ramdisk starts it, and nowhere for a subset, a before/after or changed flags, so
 * that a tuning run does not replace the figures README and docs/performance.md point to.
 */
function resultsPath(): string | undefined {
  const chosen = process.env.BENCH_RESULTS;
  if (chosen !== undefined) return chosen || undefined;
  const partial = ['BENCH_ONLY', 'BENCH_BEFORE', 'BENCH_NODE_FLAGS'].some((v) => process.env[v] !== undefined);
  return partial ? undefined : join(root, 'docs/bench-results.md');
}

/** The generated results file: what ran, where and at which commit, then the bench's own summary. */
async function writeResults(path: string, lines: string[], started: Date): Promise<void> {
  const git = async (...args: string[]) => (await execa('git', args, { cwd: root, reject: false })).stdout.trim();
  const dirty =
    (await git('status', '--porcelain', '--untracked-files=no')) !== '' ? ' (with uncommitted changes)' : '';
  const settings = [
    'BENCH_SIZE',
    'BENCH_REPS',
    'BENCH_WARMUP',
    'BENCH_SERVER',
    'BENCH_ONLY',
    'BENCH_BEFORE',
    'BENCH_NODE_FLAGS',
  ]
    .filter((v) => process.env[v] !== undefined)
    .map((v) => `${v}=${process.env[v]}`);
  const stamp = (d: Date) => `${d.toISOString().slice(0, 16).replace('T', ' ')} UTC`;
  const text = [
    '# Bench results',
    '',
    'Written by `npm run bench` (scripts/bench.ts); do not edit by hand: run it again. The method and the targets:',
    'docs/performance.md.',
    '',
    `- commit: ${await git('rev-parse', '--short', 'HEAD')}${dirty}`,
    `- run: ${stamp(started)} to ${stamp(new Date())}`,
    `- machine: ${(await execa('nproc')).stdout} CPUs, load average ${(await readFile('/proc/loadavg', 'utf8')).split(' ').slice(0, 3).join(' ')} at the end; Node ${process.version}`,
    `- settings: ${SIZE / MiB} MiB image, ${REPS} repetitions after ${WARMUP} warm-up, images served by ${SERVER}${settings.length ? ` (${settings.join(' ')})` : ''}`,
    '',
    '```text',
    ...lines.join('\n').replace(/^\n+/, '').split('\n'),
    '```',
    '',
  ].join('\n');
  await writeFile(path, text);
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the benchmark attaches and writes a loop device: run it as root');
  const started = new Date();
  const work = await workDir('ina-bench-');
  let loop: LoopDevice | undefined;
  let server: ImageServer | FileServer | undefined;
  let bufferDir = '';
  try {
    console.log(
      `Building a ${SIZE / MiB} MiB raw image (half random, half zeros) and its gzip, zstd and qcow2 forms...`,
    );
    const raw = join(work.dir, 'bench.raw');
    await buildImage(raw);
    // Only the forms the selected groups use (BENCH_ONLY below): packing 2 GiB takes minutes on a busy machine.
    const wanted = (group: string) => !process.env.BENCH_ONLY || process.env.BENCH_ONLY.split(',').includes(group);
    const gz = wanted('gzip') ? await compress(raw, 'gzip') : raw;
    const zst = wanted('zstd') ? await compress(raw, 'zstd') : raw;
    const qcow2 = await toQcow2(raw);
    const digests = {
      raw256: await sha(raw, 'sha256'),
      rawMd5: await sha(raw, 'md5'),
      gz: await sha(gz, 'sha256'),
      zst: await sha(zst, 'sha256'),
      qcow2: await sha(qcow2, 'sha256'),
    };

    current = {
      node: process.execPath,
      bundle: await bundleAgent(join(work.dir, 'after')),
      launch: await launchOf(),
    };
    const beforeTree = process.env.BENCH_BEFORE;
    if (beforeTree) {
      const node = process.env.BENCH_BEFORE_NODE ?? '/usr/bin/node';
      const nodeMajor = (await execa(node, ['--version'])).stdout.trim();
      before = {
        node,
        bundle: await bundleAgent(join(work.dir, 'before'), beforeTree, `node${nodeMajor.slice(1).split('.')[0]}`),
        launch: await launchOf(beforeTree),
      };
      console.log(
        `Before: ${beforeTree} at ${(await execa('git', ['-C', beforeTree, 'rev-parse', '--short', 'HEAD'])).stdout} on Node ${nodeMajor}; after: this tree on Node ${process.version}`,
      );
    }

    // At least 4 GiB so that the agent chooses it without root device hints; sparse, so it costs nothing.
    loop = await attachLoop(Math.max(SIZE + 64 * MiB, 4 * GiB + 64 * MiB));
    // Direct I/O to the backing file, as a real disk behaves: otherwise dd's O_DIRECT writes stop in the
    // backing file's page cache while the agent's final fdatasync pays for the real writes.
    await execa('losetup', ['--direct-io=on', loop.path]);
    let serve: (name: string, path: string) => Promise<string>;
    if (SERVER === 'nginx') {
      const files = await startNginx(work.dir);
      server = files;
      serve = async (_name, path) => files.urlOf(path);
      console.log('Image server: nginx (sendfile)');
    } else {
      const helper = await startImageServer();
      server = helper;
      serve = (name, path) => helper.serveFile(name, path);
      console.log('Image server: the test helper (Node, in this process)');
    }
    const urls = {
      raw: await serve('bench.raw', raw),
      gz: await serve('bench.raw.gz', gz),
      zst: await serve('bench.raw.zst', zst),
      qcow2: await serve('bench.qcow2', qcow2),
    };
    const dev = loop.path;
    // The ramdisk buffers images in RAM (tmpfs); the agent and the baseline both do so here too.
    bufferDir = await mkdtemp(join(existsSync('/dev/shm') ? '/dev/shm' : work.dir, 'ina-bench-'));
    const fetched = join(bufferDir, 'fetched.qcow2');
    const info = (id: string, url: string, extra: Record<string, unknown>) => ({
      id,
      urls: [url],
      stream_raw_images: true,
      ...extra,
    });

    const agent = (name: string, group: string, imageInfo: Record<string, unknown>, flags: string[] = []) => [
      { name: `agent ${name}`, group, run: () => agentDeploy(current, dev, bufferDir, imageInfo, flags) },
      ...(before
        ? [{ name: `before ${name}`, group, run: () => agentDeploy(before!, dev, bufferDir, imageInfo, flags) }]
        : []),
    ];
    const cases: { name: string; group: string; run: () => Promise<Run | AgentRun> }[] = [
      {
        name: 'curl | dd',
        group: 'raw',
        run: () => baseline(`curl -sf ${urls.raw} | dd of=${dev} bs=1M oflag=direct status=none`),
      },
      ...agent(
        'raw sha256',
        'raw',
        info('raw', urls.raw, { disk_format: 'raw', os_hash_algo: 'sha256', os_hash_value: digests.raw256 }),
      ),
      ...agent(
        'raw md5',
        'raw',
        info('raw', urls.raw, { disk_format: 'raw', os_hash_algo: 'md5', os_hash_value: digests.rawMd5 }),
      ),
      {
        name: 'curl | gzip -dc | dd',
        group: 'gzip',
        run: () => baseline(`curl -sf ${urls.gz} | gzip -dc | dd of=${dev} bs=1M oflag=direct status=none`),
      },
      ...agent(
        'gzip',
        'gzip',
        info('gz', urls.gz, { disk_format: 'raw', os_hash_algo: 'sha256', os_hash_value: digests.gz }),
      ),
      {
        name: 'curl | zstd -dc | dd',
        group: 'zstd',
        run: () => baseline(`curl -sf ${urls.zst} | zstd -dc | dd of=${dev} bs=1M oflag=direct status=none`),
      },
      ...agent(
        'zstd',
        'zstd',
        info('zst', urls.zst, { disk_format: 'raw', os_hash_algo: 'sha256', os_hash_value: digests.zst }),
      ),
      // The target's baseline converts as IPA does (every write O_DIRECT|O_DSYNC); the second one with the
      // agent's own choice (O_DIRECT, one flush at the end), to show what the rest of the agent costs.
      {
        name: 'curl > f && qemu-img convert',
        group: 'qcow2',
        run: () =>
          baseline(
            `curl -sf -o ${fetched} ${urls.qcow2}`,
            `qemu-img convert -f qcow2 -O host_device -t directsync -S 0 -W ${fetched} ${dev}`,
            `rm -f ${fetched}`,
          ),
      },
      {
        name: 'curl > f && qemu-img -t none',
        group: 'qcow2',
        run: () =>
          baseline(
            `curl -sf -o ${fetched} ${urls.qcow2}`,
            `qemu-img convert -f qcow2 -O host_device -t none -S 0 -W ${fetched} ${dev}`,
            `sync ${dev}`,
            `rm -f ${fetched}`,
          ),
      },
      // Streamed through the qcow2 reader (docs/qcow2-streaming.md); and the buffered route it replaces.
      ...agent(
        'qcow2',
        'qcow2',
        info('qcow2', urls.qcow2, { disk_format: 'qcow2', os_hash_algo: 'sha256', os_hash_value: digests.qcow2 }),
      ),
      ...agent(
        'qcow2 buffered',
        'qcow2',
        info('qcow2', urls.qcow2, { disk_format: 'qcow2', os_hash_algo: 'sha256', os_hash_value: digests.qcow2 }),
        ['--ina-qcow2-stream-spool=0'],
      ),
    ];

    // BENCH_ONLY=raw,qcow2 (groups: raw, gzip, zstd, qcow2) runs a subset, e.g. while tuning one path.
    const only = process.env.BENCH_ONLY?.split(',');
    const selected = only ? cases.filter((c) => only.includes(c.group)) : cases;
    const seconds = new Map<string, number[]>();
    const cpu = new Map<string, number[]>();
    const peaks = new Map<string, number>();
    const mib = (b: number) => (b / MiB).toFixed(1);
    const phases = new Map<string, Map<string, number[]>>();
    const idles = new Map<string, number>();
    const childPeaks = new Map<string, Map<string, number>>();
    const treePeaks = new Map<string, number>();
    const bufferPeaks = new Map<string, number>();
    for (let rep = 1 - WARMUP; rep <= REPS; rep++) {
      // Every other repetition runs the cases in reverse, so that neither side always runs first.
      for (const c of Math.abs(rep % 2) === 1 ? selected : [...selected].reverse()) {
        await settle();
        const out = await c.run();
        const s = out.seconds;
        if (rep < 1) {
          console.log(`  warm-up ${c.name.padEnd(30)} ${s.toFixed(2)} s  (not counted)`);
          continue;
        }
        if ('peakRssBytes' in out) {
          peaks.set(c.name, Math.max(peaks.get(c.name) ?? 0, out.peakRssBytes));
          idles.set(c.name.split(' ')[0]!, Math.max(idles.get(c.name.split(' ')[0]!) ?? 0, out.idleRssBytes));
          const byChild = childPeaks.get(c.name) ?? new Map<string, number>();
          for (const [name, peak] of out.childPeaks) byChild.set(name, Math.max(byChild.get(name) ?? 0, peak));
          childPeaks.set(c.name, byChild);
          treePeaks.set(c.name, Math.max(treePeaks.get(c.name) ?? 0, out.treePeakBytes));
          bufferPeaks.set(c.name, Math.max(bufferPeaks.get(c.name) ?? 0, out.bufferPeakBytes));
        }
        if (out.phases.size > 1) {
          const byPhase = phases.get(c.name) ?? new Map<string, number[]>();
          for (const [phase, t] of out.phases) byPhase.set(phase, [...(byPhase.get(phase) ?? []), t]);
          phases.set(c.name, byPhase);
        }
        seconds.set(c.name, [...(seconds.get(c.name) ?? []), s]);
        cpu.set(c.name, [...(cpu.get(c.name) ?? []), out.cpuSeconds]);
        const peak = 'peakRssBytes' in out ? `, peak ${mib(out.peakRssBytes)} MiB` : '';
        console.log(
          `  rep ${rep}  ${c.name.padEnd(30)} ${s.toFixed(2)} s  (CPU ${out.cpuSeconds.toFixed(2)} s${peak})`,
        );
      }
    }

    // What follows is printed and kept for the results file (docs/bench-results.md).
    const lines: string[] = [];
    const report = (line: string) => {
      console.log(line);
      lines.push(line);
    };
    const m = (name: string) => median(seconds.get(name)!);
    const mibs = (name: string) => (SIZE / MiB / m(name)).toFixed(0);
    report(`\nMedians over ${REPS} runs, ${SIZE / MiB} MiB image, ${(await execa('nproc')).stdout} CPUs:`);
    for (const name of seconds.keys()) {
      report(
        `  ${name.padEnd(30)} ${m(name).toFixed(2)} s  (${mibs(name)} MiB/s of image; CPU ${median(cpu.get(name)!).toFixed(2)} s)`,
      );
    }
    if (phases.size > 0) {
      report("\nWhere the time went (median seconds per step or phase; the agent's from its log):");
      for (const [name, byPhase] of phases) {
        report(
          `  ${name.padEnd(30)} ${[...byPhase].map(([phase, ts]) => `${phase} ${median(ts).toFixed(2)}`).join(', ')}`,
        );
      }
    }
    // Each repetition runs a baseline and its agent case back to back, so the ratio is taken per repetition
    // and then the median: the machine's speed drifts between repetitions more than within one.
    const ratio = (a: string, b: string, target: number) => {
      const paired = median(seconds.get(a)!.map((t, i) => t / seconds.get(b)![i]!));
      report(
        `  ${`${a} ÷ ${b}`.padEnd(56)} ${paired.toFixed(2)}  (target ≤ ${target.toFixed(2)}; ratio of medians ${(m(a) / m(b)).toFixed(2)})`,
      );
    };
    report('\nRatios (median of the per-repetition ratios):');
    const ratios: [string, string, number][] = [
      ['agent raw sha256', 'curl | dd', 1.05],
      ['agent raw md5', 'curl | dd', 1.1],
      ['agent gzip', 'curl | gzip -dc | dd', 1.05],
      ['agent zstd', 'curl | zstd -dc | dd', 1.05],
      ['agent qcow2', 'curl > f && qemu-img -t none', 1.05],
      // #20's targets: streamed qcow2 against the same content streamed raw (half of it is never downloaded),
      // and against fetching then converting as IPA does; the buffered route it replaces, for comparison.
      ['agent qcow2', 'agent raw sha256', 1.1],
      ['agent qcow2', 'curl > f && qemu-img convert', 0.7],
      ['agent qcow2 buffered', 'curl > f && qemu-img convert', 1.05],
    ];
    for (const [a, b, target] of ratios) {
      if (seconds.has(a) && seconds.has(b)) ratio(a, b, target);
      const was = a.replace(/^agent /, 'before ');
      if (seconds.has(was) && seconds.has(b)) ratio(was, b, target);
    }
    if (before) {
      report('\nAfter ÷ before, the same case (median of the per-repetition ratios; below 1 is faster now):');
      for (const name of seconds.keys()) {
        const was = name.replace(/^agent /, 'before ');
        if (name === was || !seconds.has(was)) continue;
        const paired = median(seconds.get(name)!.map((t, i) => t / seconds.get(was)![i]!));
        report(
          `  ${name.padEnd(30)} ${paired.toFixed(2)}  (peak RSS ${mib(peaks.get(name)!)} MiB, before ${mib(peaks.get(was)!)} MiB)`,
        );
      }
    }
    if (peaks.size > 0) {
      const idle = [...idles].map(([who, b]) => `${who} ${mib(b)} MiB`).join(', ');
      report(
        `\nAgent peak RSS (VmHWM of the agent process, its threads included; the highest of the repetitions; #17: raw below IPA's 83 MiB); idle before the deploy: ${idle} (the esbuild bundle the ramdisk runs)`,
      );
      for (const [name, peak] of peaks) {
        const tools = [...(childPeaks.get(name) ?? [])].map(([tool, b]) => `${tool} ${mib(b)} MiB`).join(', ');
        const note = name.endsWith(' qcow2 buffered') ? '; its buffer is in tmpfs, not in the agent' : '';
        report(`  ${name.padEnd(30)} ${mib(peak)} MiB  (tools it started: ${tools || 'none'}${note})`);
      }
      report(
        '\nPeak RSS of the agent and its children together (sampled every 50 ms; #20: streamed qcow2 ≤ 160 MiB), and peak use of the tmpfs buffer (#20: ≤ 64 MiB):',
      );
      for (const [name, peak] of treePeaks)
        report(`  ${name.padEnd(30)} ${mib(peak)} MiB with children, buffer ${mib(bufferPeaks.get(name) ?? 0)} MiB`);
    }
    const results = resultsPath();
    if (results) {
      await writeResults(results, lines, started);
      console.log(`\nResults written to ${results}`);
    }
  } finally {
    await server?.close();
    if (loop) await detachLoop(loop);
    await rm(work.dir, { recursive: true, force: true });
    if (bufferDir) await rm(bufferDir, { recursive: true, force: true });
  }
}

main().catch((err) => {
  console.error(`bench failed: ${err instanceof Error ? err.message.slice(0, 2000) : String(err)}`);
  process.exit(1);
});
