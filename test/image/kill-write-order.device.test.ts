import { existsSync } from 'node:fs';
import { mkdtemp, readFile, readdir, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { seededRandom } from '../../agent/seeded-random.ts';
import { startAgentChild, type AgentChild } from '../helpers/agent-child.ts';
import { call } from '../helpers/api-harness.ts';
import { readDevice, startPrepareImage } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { attachLoop, detachLoop, GiB, MiB, type LoopDevice } from '../helpers/loop.ts';
import { compress, makeDiskImage, toQcow2, workDir } from '../helpers/make-image.ts';
import { until } from '../helpers/until.ts';

const POINTS = 6;
const SEED = Number(process.env.INA_KILL_SEED ?? Math.floor(Math.random() * 2 ** 31));
console.log(`robust-kill-write-order: kill points seeded with ${SEED} (INA_KILL_SEED=${SEED} repeats them)`);

let loop: LoopDevice;
let work: Awaited<ReturnType<typeof workDir>>;
let images: ImageServer;
let raw: string;
let scratch: string;

interface Route {
  name: string;
  file: () => Promise<string>;
  format: string;
  stream: boolean;
  flags?: Record<string, string>;
}

const ROUTES: Route[] = [
  { name: 'raw, streamed (block writer)', file: async () => raw, format: 'raw', stream: true },
  { name: 'gzip raw, streamed (decoder pipe)', file: () => compress(raw, 'gzip'), format: 'raw', stream: true },
  { name: 'qcow2, streamed (qcow2 reader)', file: () => toQcow2(raw), format: 'qcow2', stream: true },
  {
    name: 'qcow2, buffered (qemu-img convert)',
    file: () => toQcow2(raw, `${raw}.buffered.qcow2`),
    format: 'qcow2',
    stream: false,
    flags: { 'ina-qcow2-stream-spool': '0' },
  },
];

beforeAll(async () => {
  work = await workDir();
  raw = (await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 24, randomKiB: 16 * 1024 })).path;
  images = await startImageServer();
  loop = await attachLoop(5 * GiB);
  scratch = await mkdtemp(join(tmpdir(), 'ina-kill-order-'));
});
afterAll(async () => {
  await images?.close();
  if (loop) await detachLoop(loop);
  await work?.cleanup();
  if (scratch) await rm(scratch, { recursive: true, force: true });
});

const statusFile = () => join(scratch, 'status.json');
const journal = () => `${statusFile()}.device-write`;

function agentFlags(route: Route): Record<string, string> {
  return {
    'ipa-image-buffer-dir': scratch,
    'status-file': statusFile(),
    'log-file': join(scratch, 'agent.log'),
    ...route.flags,
  };
}

/** An older deploy's GPT, which a killed write must not leave either. */
async function oldTable(): Promise<void> {
  await execa('sgdisk', ['-Z', loop.path], { reject: false });
  await execa('sgdisk', ['-o', '-n', '1:2048:+64M', '-c', '1:old', loop.path]);
  await execa('blockdev', ['--rereadpt', loop.path]);
}

/** Every view of a partition table on the loop device that finds one (empty: none does). */
async function tablesFound(): Promise<string[]> {
  const found: string[] = [];
  const blkid = await execa('blkid', ['-p', '-o', 'export', loop.path], { reject: false });
  if (blkid.exitCode !== 2) found.push(`blkid -p: ${blkid.stdout.replace(/\n/g, ' ')}`);
  const wipefs = await execa('wipefs', [loop.path], { reject: false });
  if (wipefs.stdout.trim()) found.push(`wipefs: ${wipefs.stdout.trim()}`);
  // sgdisk starts a new table in memory only when it finds neither a main nor a backup GPT (nor an MBR).
  const sgdisk = await execa('sgdisk', ['-v', loop.path], { reject: false });
  if (!/Creating new GPT entries/.test(sgdisk.stdout)) found.push(`sgdisk -v: ${sgdisk.stdout.slice(0, 300)}`);
  // The kernel's own reading, after it was asked to read the table again.
  await execa('blockdev', ['--rereadpt', loop.path], { reject: false });
  const name = basename(loop.path);
  const parts = (await readdir(`/sys/block/${name}`)).filter((n) => n.startsWith(`${name}p`));
  if (parts.length > 0) found.push(`kernel: ${parts.join(' ')}`);
  return found;
}

/** The pids of every process below `pid`. */
async function descendants(pid: number): Promise<number[]> {
  const parent = new Map<number, number>();
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const m = /^(\d+) \(.*\) \S (\d+)/.exec(await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => ''));
    if (m) parent.set(Number(m[1]), Number(m[2]));
  }
  const out: number[] = [];
  const walk = (p: number) => {
    for (const [child, pp] of parent) {
      if (pp !== p) continue;
      out.push(child);
      walk(child);
    }
  };
  walk(pid);
  return out;
}

/**
 * Waits until `pids` are gone from /proc: a killed tool lingers as a zombie while its I/O threads finish what they
 * had submitted (qemu-img, throttled), and only then is the disk in its final state (and qemu-img's lock released).
 */
async function reaped(pids: number[]): Promise<void> {
  for (let i = 0; i < 1200; i++) {
    if (pids.every((p) => !existsSync(`/proc/${p}`))) return;
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`processes ${pids.join(' ')} still there a minute after the kill`);
}

async function deploy(a: AgentChild, name: string, file: string, route: Route): Promise<void> {
  const url = await images.serveFile(name, file);
  const r = await startPrepareImage(a.url, { name, url, file, format: route.format, stream: route.stream });
  expect(r.json.command_status, r.text).toBe('RUNNING');
}

interface Command {
  command_status: string;
  command_result: { phase?: string; bytes_done?: number; bytes_total?: number } | null;
  command_error: unknown;
}

async function lastCommand(a: AgentChild): Promise<Command> {
  return (await call(`${a.url}/v1/commands/`)).json.commands.at(-1);
}

/** Polls until the write's progress passes `fraction` (or the command ended); returns what it last saw. */
/** The deploy once it has written `fraction` of the image, or once it ended. */
function writtenUpTo(a: AgentChild, fraction: number): Promise<Command> {
  return until(
    `the deploy to write ${fraction * 100} % of the image`,
    async () => {
      const c = await lastCommand(a);
      if (c.command_status !== 'RUNNING') return c;
      const p = c.command_result;
      if (p && ['stream', 'write', 'convert'].includes(p.phase ?? '') && p.bytes_total) {
        if ((p.bytes_done ?? 0) >= fraction * p.bytes_total) return c;
      }
      return undefined;
    },
    300_000,
  );
}

describe.each(ROUTES)('SIGKILL mid-deploy: $name', (route) => {
  it(`leaves no partition table at any of ${POINTS} seeded kill points, and a normal deploy matches qemu-img convert`, {
    timeout: 600_000,
  }, async () => {
    const random = seededRandom(SEED + ROUTES.indexOf(route));
    const file = await route.file();
    const baseline = join(scratch, 'baseline.raw');
    await execa('qemu-img', ['convert', '-q', '-O', 'raw', route.format === 'qcow2' ? file : raw, baseline]);
    const reference = await readFile(baseline);
    await rm(baseline);
    const backup = reference.length - 33 * 512;
    /** The device holds the whole image, as qemu-img convert makes it (the GPT's moved backup aside). */
    const holdsImage = async () => {
      const disk = await readDevice(loop.path, 0, reference.length);
      return (
        disk.subarray(0, 446).equals(reference.subarray(0, 446)) &&
        disk.subarray(1024, backup).equals(reference.subarray(1024, backup))
      );
    };
    let cleared = 0;
    for (let point = 0; point < POINTS; point++) {
      const fraction = random() * 0.95;
      await oldTable();
      const a = await startAgentChild(loop.path, {
        throttle: { device: loop.path, bytesPerSecond: 6 * MiB },
        flags: agentFlags(route),
      });
      let seen: Command;
      try {
        await deploy(a, `kill-${point}`, file, route);
        seen = await writtenUpTo(a, fraction);
        const tools = await descendants(a.pid);
        a.child.kill('SIGKILL');
        await a.exited;
        await reaped(tools);
      } finally {
        await a.stop();
      }
      const where = `seed ${SEED}, point ${point} (${(fraction * 100).toFixed(1)}%): ${JSON.stringify(seen)}`;
      const begun = existsSync(journal());
      const found = await tablesFound();
      const table = (await execa('sgdisk', ['-p', loop.path], { reject: false })).stdout;
      if (seen.command_status !== 'RUNNING' || (!begun && !/\bold\b/.test(table))) {
        // The write was over before the kill (a loaded machine answers the poll late, so the point was passed
        // unseen): the command ended, or its note is gone with the new image settled and only its last stages
        // (the partition check, the config drive) left. Such a point proves nothing about a cut write; what holds
        // is that a finished write removed its note and the image's table in place.
        if (seen.command_status !== 'RUNNING') expect(seen.command_status, where).toBe('SUCCEEDED');
        expect(begun, where).toBe(false);
        expect(found.length, where).toBeGreaterThan(0);
        expect(await holdsImage(), `${where}: a table without the whole image`).toBe(true);
        continue;
      }
      if (begun) {
        expect(found, where).toEqual([]);
      } else {
        // Killed before the device was touched (still downloading, or the head not yet checked): as it was.
        expect(seen.command_status, where).toBe('RUNNING');
        expect(
          found.some((f) => f.startsWith('kernel:')),
          where,
        ).toBe(true);
        expect((await execa('sgdisk', ['-p', loop.path])).stdout, where).toMatch(/\bold\b/);
      }
      // The supervisor's part: the agent again, on the same status file.
      const b = await startAgentChild(loop.path, { flags: agentFlags(route) });
      try {
        // On stderr before the API listens, though the two streams may reach the test in either order.
        const said = () =>
          b.output.find((l) => l.startsWith('ironic-node-agent:') && l.includes('an image write begun at'));
        if (begun) {
          cleared++;
          await expect.poll(said, { timeout: 10_000 }).toBeDefined();
          expect(said(), where).toMatch(
            new RegExp(`^ironic-node-agent: cleared ${loop.path}: an image write begun at`),
          );
          expect(existsSync(journal()), where).toBe(false);
          expect(await tablesFound(), where).toEqual([]);
          expect((await readDevice(loop.path, 0, MiB)).equals(Buffer.alloc(MiB)), where).toBe(true);
        } else {
          expect(said(), where).toBeUndefined();
        }
      } finally {
        await b.stop();
      }
    }
    // Most points fall inside the write (the download runs ahead of the throttled disk by a few MiB only).
    expect(cleared, `seed ${SEED}`).toBeGreaterThan(0);

    // Not killed: the same bytes as qemu-img convert's (the raw image), apart from what moving the backup GPT to
    // the disk's end changes: the protective MBR's partition size, the primary header, the old backup.
    await oldTable();
    const a = await startAgentChild(loop.path, { flags: agentFlags(route) });
    try {
      await deploy(a, 'whole', file, route);
      let c = await lastCommand(a);
      for (; c.command_status === 'RUNNING'; c = await lastCommand(a)) await new Promise((r) => setTimeout(r, 50));
      expect(c.command_error).toBeNull();
    } finally {
      await a.stop();
    }
    expect(await holdsImage()).toBe(true);
    expect(existsSync(journal())).toBe(false);
    expect((await execa('sgdisk', ['-v', loop.path])).stdout).toMatch(/No problems found/);
  });
});
