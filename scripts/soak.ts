// `npm run soak`: many deploys of small images in a row by one agent process, through every path (raw,
// gzip, zstd, xz, qcow2, a checksum URL, a config-drive URL), from a loopback server that at random closes
// after the body, keeps the connection alive, stalls, resets or cuts the body short. Every command must end
// SUCCEEDED or FAILED with an error that says what happened, the agent must stay up, and what it holds
// (open file descriptors, child processes, attached loop devices, buffer files, RSS) must be the same at
// the end as after the first ten deploys. SOAK_DEPLOYS (default 300), SOAK_SEED (default 17),
// SOAK_MAX_S (default 1800: the run stops there and says so). Between deploys, hostile requests from
// docs/safety.md (prototype-chain names, deep JSON, an oversized body, a digest of the wrong length, a
// truncated qcow2, a config drive without room) must get their documented answers. With SUITE_REPORT set
// (by .ci/run), the counts are also written there as JSON in vitest's shape.
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, readlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { request as httpRequest } from 'node:http';
import { execa } from 'execa';
import { startAgentChild, type AgentChild } from '../test/helpers/agent-child.ts';
import { buildIso, toWire } from '../test/helpers/configdrive.ts';
import { attachLoop, detachLoop, GiB, MiB, type LoopDevice } from '../test/helpers/loop.ts';
import { compress, fourMbrPrimaries, makeDiskImage, toQcow2, workDir } from '../test/helpers/make-image.ts';
import { startRawHttpServer, type Behaviour } from '../test/helpers/raw-http-server.ts';
import { seededRandom } from '../agent/seeded-random.ts';
import { shippedLaunch } from './lib/shipped-launch.ts';

const DEPLOYS = Number(process.env.SOAK_DEPLOYS ?? 300);
const SEED = Number(process.env.SOAK_SEED ?? 17);
const MAX_S = Number(process.env.SOAK_MAX_S ?? 1800);

const random = seededRandom(SEED);

/** Mostly good answers, so that most deploys get through; each fault often enough to be met dozens of times. */
function pickBehaviour(): Behaviour {
  const r = random();
  return r < 0.35 ? 'close' : r < 0.7 ? 'keep-alive' : r < 0.8 ? 'stall' : r < 0.9 ? 'reset' : 'truncate';
}

interface Resources {
  fds: number;
  children: number;
  loops: number;
  buffers: number;
  rssMiB: number;
}

/**
 * The figures once V8 has collected everything the agent no longer holds: a full collection asked through the
 * agent's inspector (loopback only), then a moment for the freed pages to go. Without it the RSS samples
 * compared how much garbage happened to wait for a collection at each point (docs/runtime.md, "Soak").
 */
async function settledResources(agent: AgentChild, bufferDir: string): Promise<Resources> {
  await collectGarbage(agent);
  await new Promise((r) => setTimeout(r, 2_000));
  return resources(agent.pid, bufferDir);
}

async function collectGarbage(agent: AgentChild): Promise<void> {
  const url = agent.output.map((l) => /Debugger listening on (ws:\/\/\S+)/.exec(l)?.[1]).find(Boolean);
  if (!url) throw new Error('the agent did not start its inspector (--inspect)');
  const ws = new WebSocket(url);
  // An agent that dies or stops answering fails the soak with a reason, instead of holding it until CI's limit.
  const lost = new Promise<never>((_, reject) => {
    const fail = (why: string) => reject(new Error(`the agent's inspector at ${url} ${why}`));
    ws.onerror = () => fail('cannot be reached');
    ws.onclose = () => fail('closed the connection');
    setTimeout(() => fail('did not answer within 60 s'), 60_000).unref();
  });
  lost.catch(() => undefined);
  try {
    await Promise.race([new Promise((resolve) => (ws.onopen = resolve)), lost]);
    for (let id = 1; id <= 2; id++) {
      const answered = new Promise((resolve) => {
        ws.onmessage = (m) => {
          if ((JSON.parse(String(m.data)) as { id?: number }).id === id) resolve(undefined);
        };
      });
      ws.send(JSON.stringify({ id, method: 'HeapProfiler.collectGarbage' }));
      await Promise.race([answered, lost]);
    }
  } finally {
    ws.onclose = null;
    ws.close();
  }
}

async function resources(pid: number, bufferDir: string): Promise<Resources> {
  const fds = (await readdir(`/proc/${pid}/fd`)).length;
  let children = 0;
  for (const p of await readdir('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const stat = await readFile(`/proc/${p}/stat`, 'utf8').catch(() => '');
    // tsx's esbuild service (the TypeScript loader the soak starts the agent with) is not the agent's.
    const name = stat.slice(stat.indexOf('(') + 1, stat.lastIndexOf(')'));
    if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid && name !== 'esbuild') children++;
  }
  // Other loop devices on the machine are not the agent's: only those backed by its buffer files count.
  const loops = (await execa('losetup', ['-a'])).stdout.split('\n').filter((l) => l.includes(bufferDir)).length;
  const buffers = (await readdir(bufferDir)).length;
  const rss = /VmRSS:\s+(\d+) kB/.exec(await readFile(`/proc/${pid}/status`, 'utf8'))?.[1];
  return { fds, children, loops, buffers, rssMiB: Number(rss) / 1024 };
}

/**
 * Requests a hostile client sends (docs/safety.md): each resolves with what was wrong about the answer, or
 * null when it was the documented one.
 */
interface HostileContext {
  truncatedUrl: string;
  truncatedSha: string;
  /** A raw image with four MBR primaries, and a config drive for it. */
  fourUrl: string;
  fourSha: string;
  drive: string;
}

interface Hostile {
  name: string;
  send(url: string, ctx: HostileContext): Promise<string | null>;
}

async function postText(url: string, body: string): Promise<{ status: number; text: string }> {
  const res = await fetch(`${url}/v1/commands/?wait=true`, {
    method: 'POST',
    body,
    signal: AbortSignal.timeout(120_000),
  });
  return { status: res.status, text: await res.text() };
}

function expectAnswer(got: { status: number; text: string }, status: number, pattern: RegExp): string | null {
  return got.status === status && pattern.test(got.text) ? null : `HTTP ${got.status} ${got.text.slice(0, 200)}`;
}

/** Declares a 100 MB body and sends 1 MiB of it: the agent must answer 413 from the header alone. */
function oversized(url: string): Promise<string | null> {
  return new Promise((resolve) => {
    const req = httpRequest(`${url}/v1/commands/`, { method: 'POST', headers: { 'content-length': 100_000_000 } });
    req.on('response', (res) => {
      res.resume();
      resolve(res.statusCode === 413 ? null : `HTTP ${res.statusCode}`);
      req.destroy();
    });
    req.on('error', (err) => resolve(`no answer: ${err.message}`));
    req.write(Buffer.alloc(MiB, 0x20));
  });
}

const HOSTILE: Hostile[] = [
  {
    name: 'prototype-name',
    send: async (url) =>
      expectAnswer(
        await postText(url, '{"name": "constructor.keys", "params": {}}'),
        404,
        /Extension with id constructor not found/,
      ),
  },
  {
    name: 'deep-json',
    send: async (url) =>
      expectAnswer(
        await postText(
          url,
          `{"name": "clean.execute_clean_step", "params": {"step": ${'['.repeat(100_000)}${']'.repeat(100_000)}}}`,
        ),
        400,
        /nesting deeper than/,
      ),
  },
  { name: 'oversized-body', send: (url) => oversized(url) },
  {
    name: 'wrong-length-digest',
    send: async (url) =>
      expectAnswer(
        await postText(
          url,
          JSON.stringify({
            name: 'standby.prepare_image',
            params: {
              image_info: {
                id: 'x',
                urls: ['http://127.0.0.1:9/x'],
                os_hash_algo: 'sha512',
                os_hash_value: 'a'.repeat(64),
              },
            },
          }),
        ),
        400,
        /is not a sha512 digest/,
      ),
  },
  {
    name: 'truncated-qcow2',
    send: async (url, ctx) => {
      const info = {
        id: 'truncated',
        urls: [ctx.truncatedUrl],
        disk_format: 'qcow2',
        os_hash_algo: 'sha256',
        os_hash_value: ctx.truncatedSha,
      };
      const got = await postText(url, JSON.stringify({ name: 'standby.prepare_image', params: { image_info: info } }));
      // The server's random faults may end it earlier, with their own clear error; it must never succeed.
      const r = JSON.parse(got.text) as { command_status?: string; command_error?: { details?: string } | null };
      return r.command_status === 'FAILED' && r.command_error?.details
        ? null
        : `HTTP ${got.status} ${got.text.slice(0, 200)}`;
    },
  },
  {
    name: 'no-config-drive-room',
    send: async (url, ctx) => {
      const info = {
        id: 'four',
        urls: [ctx.fourUrl],
        disk_format: 'raw',
        stream_raw_images: false,
        os_hash_algo: 'sha256',
        os_hash_value: ctx.fourSha,
      };
      const got = await postText(
        url,
        JSON.stringify({ name: 'standby.prepare_image', params: { image_info: info, configdrive: ctx.drive } }),
      );
      const r = JSON.parse(got.text) as {
        command_status?: string;
        command_error?: { type?: string; details?: string } | null;
      };
      // A download fault may end it first, with its own clear error; a config drive error must be the early one.
      if (r.command_status !== 'FAILED' || !r.command_error?.details)
        return `HTTP ${got.status} ${got.text.slice(0, 200)}`;
      if (
        r.command_error.type === 'ConfigDriveError' &&
        !/refused before writing the image/.test(r.command_error.details)
      )
        return r.command_error.details;
      return null;
    },
  },
];

const show = (r: Resources) =>
  `fds ${r.fds}, children ${r.children}, loop devices ${r.loops}, buffer files ${r.buffers}, RSS ${r.rssMiB.toFixed(1)} MiB`;

async function main(): Promise<void> {
  const work = await workDir('ina-soak-');
  const bufferDir = join(work.dir, 'buffers');
  await mkdir(bufferDir);
  let loop: LoopDevice | undefined;
  let agent: AgentChild | undefined;
  const server = await startRawHttpServer({ behaviour: pickBehaviour });
  const started = Date.now();
  let succeeded = 0;
  let failedClearly = 0;
  const lost: string[] = [];
  const errors = new Map<string, number>();
  const hostile = new Map<string, number>();
  let first: Resources | undefined;
  let last: Resources | undefined;
  let done = 0;
  try {
    const raw = (await makeDiskImage(work.dir, { table: 'mbr', sizeMiB: 6, randomKiB: 1024 })).path;
    const image = await readFile(raw);
    const sha = createHash('sha256').update(image).digest('hex');
    const urls: Record<string, string> = { raw: server.serve('image.raw', image) };
    for (const kind of ['gzip', 'zstd', 'xz'] as const)
      urls[kind] = server.serve(`image.${kind}`, await readFile(await compress(raw, kind)));
    const qcow2 = await readFile(await toQcow2(raw));
    urls.qcow2 = server.serve('image.qcow2', qcow2);
    const sums = server.serve('SHA256SUMS', `${sha}  image.raw\n`);
    const drive = server.serve('config-drive.iso', await buildIso());
    const digests: Record<string, string> = {
      raw: sha,
      gzip: '',
      zstd: '',
      xz: '',
      qcow2: createHash('sha256').update(qcow2).digest('hex'),
    };
    for (const kind of ['gzip', 'zstd', 'xz'])
      digests[kind] = createHash('sha256')
        .update(await readFile(`${raw}.${kind === 'gzip' ? 'gz' : kind === 'zstd' ? 'zst' : 'xz'}`))
        .digest('hex');
    const paths = ['raw', 'gzip', 'zstd', 'xz', 'qcow2', 'checksum-url', 'config-drive-url'] as const;
    const truncated = qcow2.subarray(0, Math.floor(qcow2.length / 2));
    const truncatedUrl = server.serve('truncated.qcow2', truncated);
    const truncatedSha = createHash('sha256').update(truncated).digest('hex');
    const fourFile = join(work.dir, 'four.raw');
    await execa('truncate', ['-s', '16M', fourFile]);
    await fourMbrPrimaries(fourFile, [1, 4, 7, 10, 13]);
    const four = await readFile(fourFile);
    const hostileContext: HostileContext = {
      truncatedUrl,
      truncatedSha,
      fourUrl: server.serve('four.raw', four),
      fourSha: createHash('sha256').update(four).digest('hex'),
      drive: toWire(await buildIso()),
    };

    loop = await attachLoop(5 * GiB);
    // With the ramdisk's node flags and environment: its memory is what the RSS check is about.
    const launch = await shippedLaunch(join(import.meta.dirname, '..'));
    agent = await startAgentChild(loop.path, {
      nodeArgs: [...launch.flags, '--inspect=127.0.0.1:0'],
      env: launch.env,
      flags: {
        'ipa-image-buffer-dir': bufferDir,
        'ipa-image-download-connection-timeout': '1',
        'ipa-image-download-connection-retries': '2',
        'ipa-image-download-connection-retry-interval': '0.05',
      },
    });
    console.log(`soak: ${DEPLOYS} deploys, seed ${SEED}, at most ${MAX_S} s; agent pid ${agent.pid} on ${loop.path}`);
    for (let i = 0; i < DEPLOYS; i++) {
      if ((Date.now() - started) / 1000 > MAX_S) {
        lost.push(`stopped after ${i} deploys: SOAK_MAX_S (${MAX_S} s) reached`);
        break;
      }
      const path = paths[i % paths.length]!;
      const kind = path === 'checksum-url' || path === 'config-drive-url' ? 'raw' : path;
      const info = {
        id: `soak-${i}`,
        urls: [urls[kind]!],
        disk_format: kind === 'qcow2' ? 'qcow2' : 'raw',
        stream_raw_images: true,
        os_hash_algo: 'sha256',
        os_hash_value: path === 'checksum-url' ? sums : digests[kind],
      };
      const params = { image_info: info, ...(path === 'config-drive-url' ? { configdrive: drive } : {}) };
      try {
        const res = await fetch(`${agent.url}/v1/commands/?wait=true`, {
          method: 'POST',
          body: JSON.stringify({ name: 'standby.prepare_image', params }),
          signal: AbortSignal.timeout(120_000),
        });
        const r = (await res.json()) as {
          command_status: string;
          command_error: { type: string; details: string } | null;
        };
        if (r.command_status === 'SUCCEEDED') succeeded++;
        else if (r.command_status === 'FAILED' && r.command_error?.type && r.command_error.details) {
          failedClearly++;
          const key = `${r.command_error.type}: ${r.command_error.details.replace(/\d+/g, 'N').slice(0, 110)}`;
          errors.set(key, (errors.get(key) ?? 0) + 1);
        } else lost.push(`deploy ${i} (${path}): HTTP ${res.status} ${JSON.stringify(r).slice(0, 300)}`);
      } catch (err) {
        lost.push(`deploy ${i} (${path}): ${(err as Error).message}`);
      }
      // Between deploys, one hostile request (docs/safety.md): each must get its documented answer.
      const attack = HOSTILE[i % HOSTILE.length]!;
      try {
        const why = await attack.send(agent.url, hostileContext);
        if (why) lost.push(`hostile ${attack.name} after deploy ${i}: ${why}`);
        else hostile.set(attack.name, (hostile.get(attack.name) ?? 0) + 1);
      } catch (err) {
        lost.push(`hostile ${attack.name} after deploy ${i}: ${(err as Error).message}`);
      }
      done = i + 1;
      if (!agent.alive()) {
        lost.push(`the agent died after deploy ${i}:\n${agent.output.slice(-20).join('\n')}`);
        break;
      }
      if (done === Math.min(10, DEPLOYS)) {
        first = await settledResources(agent, bufferDir);
        console.log(`soak: after ${done} deploys: ${show(first)}`);
      }
    }
    if (agent.alive()) {
      last = await settledResources(agent, bufferDir);
      console.log(`soak: after ${done} deploys: ${show(last)}`);
      if (last.children > 0) {
        for (const p of await readdir('/proc')) {
          const stat = /^\d+$/.test(p) ? await readFile(`/proc/${p}/stat`, 'utf8').catch(() => '') : '';
          if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === agent.pid)
            console.log(`soak: child: ${stat.slice(0, 80)}`);
        }
      }
      const fds = await readdir(`/proc/${agent.pid}/fd`);
      if (first && last.fds > first.fds) {
        console.log(
          `soak: open files: ${(await Promise.all(fds.map((f) => readlink(`/proc/${agent!.pid}/fd/${f}`).catch(() => '?')))).join(', ')}`,
        );
      }
    }
  } finally {
    await agent?.stop();
    if (loop) await detachLoop(loop);
    await server.close();
    await work.cleanup();
  }

  for (const [text, n] of [...errors].sort((a, b) => b[1] - a[1])) console.log(`  ${String(n).padStart(4)} × ${text}`);
  console.log(
    `soak: hostile requests answered as documented: ${[...hostile].map(([k, n]) => `${k} ${n}`).join(', ') || 'none'}`,
  );
  for (const text of lost) console.log(`soak: LOST ${text}`);
  // Flat means: nothing more held at the end than after the first ten; RSS may move with V8's heap sizing.
  const checks: [string, boolean][] = [
    ['every command ended SUCCEEDED or FAILED with a clear error', lost.length === 0],
    ['open file descriptors', !!first && !!last && last.fds <= first.fds],
    ['child processes', !!first && !!last && last.children <= first.children && last.children === 0],
    ['loop devices', !!first && !!last && last.loops === 0],
    ['buffer files', !!first && !!last && last.buffers === 0],
    ['RSS within 32 MiB of the first ten', !!first && !!last && last.rssMiB - first.rssMiB <= 32],
  ];
  for (const [what, ok] of checks) if (!ok) console.log(`soak: FAILED: ${what}`);
  const passed = checks.filter(([, ok]) => ok).length;
  const secs = ((Date.now() - started) / 1000).toFixed(0);
  console.log(
    `soak: ${done} deploys in ${secs} s: ${succeeded} succeeded, ${failedClearly} failed with a clear error, ${lost.length} lost; ` +
      `resources ${first ? show(first) : '?'} -> ${last ? show(last) : '?'}; ${passed} of ${checks.length} checks passed`,
  );
  if (process.env.SUITE_REPORT) {
    const failed = checks.length - passed;
    await writeFile(
      process.env.SUITE_REPORT,
      JSON.stringify({
        numPassedTests: passed,
        numFailedTests: failed,
        numPendingTests: 0,
        numTodoTests: 0,
        success: failed === 0,
      }),
    );
  }
  process.exitCode = passed === checks.length ? 0 : 1;
}

await main();
