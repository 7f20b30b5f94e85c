// The agent's tools die with it: a SIGKILLed agent leaves no qemu-img or dd writing the disk (parent-death
// signal through setpriv), and SIGTERM during a write cancels the command, records it as interrupted in
// the log and the status file, and leaves no writer and no bootable half image behind. The agent runs as
// its own process with its writes throttled (blkio cgroup), so that a write is surely in progress.
import { randomBytes } from 'node:crypto';
import { mkdtemp, readFile, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { startAgentChild, type AgentChild } from '../helpers/agent-child.ts';
import { readDevice, startPrepareImage } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { attachLoop, detachLoop, GiB, MiB, type LoopDevice } from '../helpers/loop.ts';
import { makeDiskImage, toQcow2, workDir } from '../helpers/make-image.ts';
import { until } from '../helpers/until.ts';

let loop: LoopDevice;
let work: Awaited<ReturnType<typeof workDir>>;
let images: ImageServer;
let raw: string;
let agent: AgentChild | undefined;
let scratch: string;

beforeAll(async () => {
  work = await workDir();
  raw = (await makeDiskImage(work.dir, { table: 'gpt', sizeMiB: 24, randomKiB: 16 * 1024 })).path;
  images = await startImageServer();
  // The agent picks the smallest disk of at least 4 GiB when no hints are given; the file stays sparse.
  loop = await attachLoop(5 * GiB);
});
afterEach(async () => {
  await agent?.stop();
  agent = undefined;
  if (scratch) await rm(scratch, { recursive: true, force: true });
});
afterAll(async () => {
  await images?.close();
  if (loop) await detachLoop(loop);
  await work?.cleanup();
});

interface Proc {
  pid: number;
  comm: string;
}

/** Every live descendant of `pid` (zombies count as gone). */
async function descendants(pid: number): Promise<Proc[]> {
  const all: { pid: number; ppid: number; comm: string; state: string }[] = [];
  for (const entry of await readdir('/proc')) {
    if (!/^\d+$/.test(entry)) continue;
    const stat = await readFile(`/proc/${entry}/stat`, 'utf8').catch(() => '');
    const m = /^(\d+) \((.*)\) (\S) (\d+)/.exec(stat);
    if (m) all.push({ pid: Number(m[1]), comm: m[2]!, state: m[3]!, ppid: Number(m[4]) });
  }
  const out: Proc[] = [];
  const walk = (parent: number) => {
    for (const p of all.filter((q) => q.ppid === parent)) {
      if (p.state !== 'Z') out.push({ pid: p.pid, comm: p.comm });
      walk(p.pid);
    }
  };
  walk(pid);
  return out;
}

async function alive(pids: number[]): Promise<number[]> {
  const out: number[] = [];
  for (const pid of pids) {
    const stat = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
    if (stat && !/^\d+ \(.*\) Z/.test(stat)) out.push(pid);
  }
  return out;
}

async function startThrottled(): Promise<AgentChild> {
  scratch = await mkdtemp(join(tmpdir(), 'ina-kill-'));
  agent = await startAgentChild(loop.path, {
    throttle: { device: loop.path, bytesPerSecond: 1024 * 1024 },
    flags: {
      'ipa-image-buffer-dir': scratch,
      // These tests are about qemu-img, which only the buffered route runs.
      'ina-qcow2-stream-spool': '0',
      'status-file': join(scratch, 'status.json'),
      'log-file': join(scratch, 'agent.log'),
    },
  });
  return agent;
}

async function deploy(a: AgentChild, name: string, file: string, format: string, stream: boolean): Promise<void> {
  const url = await images.serveFile(name, file);
  const r = await startPrepareImage(a.url, { name, url, file, format, stream });
  expect(r.json.command_status, r.text).toBe('RUNNING');
}

describe('tools die with the agent', () => {
  it('SIGKILL during a qemu-img conversion: qemu-img is gone with the agent', async () => {
    const a = await startThrottled();
    await deploy(a, 'kill.qcow2', await toQcow2(raw), 'qcow2', false);
    const writer = await until(
      'qemu-img to run',
      async () => (await descendants(a.pid)).find((p) => p.comm === 'qemu-img'),
      30_000,
    );
    // Let it get going, so that it has a long throttled write ahead of it.
    await new Promise((r) => setTimeout(r, 1000));
    const family = (await descendants(a.pid)).map((p) => p.pid);
    a.child.kill('SIGKILL');
    await a.exited;
    await new Promise((r) => setTimeout(r, 300));
    expect(await alive([writer.pid, ...family])).toEqual([]);
    // A killed qemu-img lingers as a zombie whose I/O threads finish the throttled writes already submitted
    // (in the middle of the disk, never its ends), holding its lock on the device until they are done: waited
    // out here, so that the next test's qemu-img can take the device.
    await until(
      'the killed qemu-img to be reaped',
      async () => ((await readFile(`/proc/${writer.pid}/stat`).catch(() => null)) ? undefined : true),
      60_000,
    );
    // The killed deploy's buffer file is left behind; the next start deletes it.
    const leaked = (await readdir(scratch)).filter((n) => n.startsWith('ina-image-'));
    expect(leaked).toHaveLength(1);
    agent = await startAgentChild(loop.path, { flags: { 'ipa-image-buffer-dir': scratch } });
    expect((await readdir(scratch)).filter((n) => n.startsWith('ina-image-'))).toEqual([]);
    expect(agent.output.join('\n')).toContain('deleted image buffers left by a deploy that did not finish');
  });

  it('SIGTERM during a write: the command is recorded as interrupted, its tools are gone, the disk is cleared', async () => {
    const a = await startThrottled();
    // Something bootable-looking on the disk before: it must not survive as a half image either.
    await writeFile(loop.path, randomBytes(MiB));
    await deploy(a, 'term.qcow2', await toQcow2(raw), 'qcow2', false);
    await until('qemu-img to run', async () => (await descendants(a.pid)).find((p) => p.comm === 'qemu-img'), 30_000);
    await new Promise((r) => setTimeout(r, 1000));
    const family = (await descendants(a.pid)).map((p) => p.pid);
    a.child.kill('SIGTERM');
    expect(await a.exited).toBe(0);
    expect(await alive(family)).toEqual([]);
    const status = JSON.parse(await readFile(join(scratch, 'status.json'), 'utf8'));
    expect(status.commands).toHaveLength(1);
    expect(status.commands[0]).toMatchObject({ name: 'standby.prepare_image', status: 'FAILED' });
    expect(status.commands[0].error.details).toMatch(/received SIGTERM and stopped during this command/);
    const log = await readFile(join(scratch, 'agent.log'), 'utf8');
    expect(log).toMatch(/standby\.prepare_image interrupted by SIGTERM/);
    expect((await readDevice(loop.path, 0, MiB)).equals(Buffer.alloc(MiB))).toBe(true);
    // The cancelled deploy took its buffer file with it.
    expect((await readdir(scratch)).filter((n) => n.startsWith('ina-image-'))).toEqual([]);
  });
});
