// The zeroing shell's blkdiscard must not outlive a SIGKILLed agent: the kernel does not pass the shell's
// parent-death signal on to its children, so each blkdiscard needs its own. The agent here is a Node process
// of its own running DeviceZeroing, killed outright; blkdiscard is a stand-in that sleeps (no device needed).
import { spawn } from 'node:child_process';
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';

const root = new URL('../../..', import.meta.url).pathname;
const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  await Promise.allSettled(cleanups.splice(0).map((c) => c()));
});

const gone = (pid: number) =>
  readFile(`/proc/${pid}/stat`, 'utf8').then(
    (s) => /^\d+ \(.*\) Z/.test(s),
    () => true,
  );

async function until(what: () => Promise<boolean>, tries = 200): Promise<boolean> {
  for (let i = 0; i < tries; i++) {
    if (await what()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return false;
}

describe('a zeroing range still running when the agent is SIGKILLed', () => {
  it('ends: its blkdiscard gets the parent-death signal too', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-zeroing-'));
    cleanups.push(() => rm(dir, { recursive: true, force: true }));
    const pids = join(dir, 'blkdiscard.pids');
    await writeFile(join(dir, 'blkdiscard'), `#!/bin/sh\necho $$ >> ${pids}\nexec sleep 300\n`, { mode: 0o755 });
    const script = [
      `import { DeviceZeroing } from ${JSON.stringify(join(root, 'agent/image/qcow2/device-zeroing.ts'))};`,
      `new DeviceZeroing(${JSON.stringify(join(dir, 'device'))}).add(0, 4096);`,
      'setInterval(() => undefined, 60_000);',
    ].join('\n');
    const agent = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', script], {
      cwd: root,
      env: { ...process.env, PATH: `${dir}:${process.env.PATH}` },
      stdio: 'ignore',
    });
    const exited = new Promise((r) => agent.once('exit', r));
    cleanups.push(async () => {
      agent.kill('SIGKILL');
      await exited;
    });
    expect(await until(async () => (await readFile(pids, 'utf8').catch(() => '')) !== ''), 'blkdiscard started').toBe(
      true,
    );
    const pid = Number((await readFile(pids, 'utf8')).trim());
    cleanups.push(async () => {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // gone, as it should be
      }
    });
    agent.kill('SIGKILL');
    await exited;
    expect(await until(() => gone(pid)), 'blkdiscard outlived the agent').toBe(true);
  });
});
