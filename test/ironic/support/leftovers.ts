// What a test file started that must not outlive the run if its worker dies mid-test (Ironic, the
// agent, loop devices): each start is noted in a file, and the global teardown ends what is still there.
import { appendFileSync, existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import { execFileSync } from 'node:child_process';

export type Leftover =
  | { kind: 'ironic'; runDir: string; stop: string }
  | { kind: 'agent'; pid: number }
  | { kind: 'registry'; pid: number; config: string }
  | { kind: 'loop'; dev: string; file: string }
  | { kind: 'dir'; path: string };

export function noteStarted(file: string, item: Leftover): void {
  appendFileSync(file, `${JSON.stringify(item)}\n`);
}

function backingFile(dev: string): string | null {
  try {
    return readFileSync(`/sys/block/${basename(dev)}/loop/backing_file`, 'utf8').trim();
  } catch {
    return null;
  }
}

/** Whether `pid` still runs a command line holding `word` (not a reused PID). */
function runs(pid: number, word: string): boolean {
  try {
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(word);
  } catch {
    return false;
  }
}

function isOurAgent(pid: number): boolean {
  return runs(pid, 'agent/main.ts');
}

/** Stops what is still running; returns a line per thing it had to stop. */
export function stopLeftovers(file: string): string[] {
  if (!existsSync(file)) return [];
  const stopped: string[] = [];
  // last started, first ended: the agent before its disk, the disk before its directory
  const items = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l !== '')
    .map((l) => JSON.parse(l) as Leftover);
  for (const item of items.reverse()) {
    if (item.kind === 'dir') {
      if (existsSync(item.path)) rmSync(item.path, { recursive: true, force: true });
    } else if (item.kind === 'ironic') {
      if (!existsSync(item.runDir) || !readdirSync(item.runDir).some((f) => f.endsWith('.pid'))) continue;
      execFileSync('bash', [item.stop, item.runDir], { stdio: 'ignore' });
      rmSync(item.runDir, { recursive: true, force: true });
      stopped.push(`Ironic in ${item.runDir}`);
    } else if (item.kind === 'loop') {
      if (backingFile(item.dev) !== item.file) continue;
      execFileSync('losetup', ['-d', item.dev], { stdio: 'ignore' });
      rmSync(dirname(item.file), { recursive: true, force: true });
      stopped.push(`loop device ${item.dev}`);
    } else if (item.kind === 'registry') {
      if (!runs(item.pid, item.config)) continue;
      try {
        process.kill(-item.pid, 'SIGKILL');
        stopped.push(`docker-registry process group ${item.pid}`);
      } catch {
        // gone meanwhile
      }
    } else if (isOurAgent(item.pid)) {
      try {
        process.kill(-item.pid, 'SIGKILL');
        stopped.push(`agent process group ${item.pid}`);
      } catch {
        // gone meanwhile
      }
    }
  }
  return stopped;
}

export function leftoversFileIn(dir: string): string {
  return join(dir, 'started.jsonl');
}
