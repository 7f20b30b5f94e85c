// startTool, the runner of every tool whose pipes the agent wires: how a stubborn tool is stopped, how a missing
// one is told apart from a failed one, and that bytes handed from tool to tool arrive whole. No root needed.
import { createHash, randomBytes } from 'node:crypto';
import { once } from 'node:events';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTool, type Tool } from '../agent/exec.ts';

/** A shell that ignores SIGTERM (the ignoring survives its exec into sleep), and says so once it does. */
function stubborn(signal?: AbortSignal): { tool: Tool; ready: Promise<unknown> } {
  const tool = startTool('sh', ['-c', "trap '' TERM; echo ready; exec sleep 60"], signal ? { signal } : {});
  const ready = once(tool.stdout!, 'data');
  return { tool, ready };
}

describe('startTool', () => {
  it('kills a tool that ignores SIGTERM with SIGKILL after kill()', async () => {
    const { tool, ready } = stubborn();
    await ready;
    tool.kill();
    const exit = await tool.exit;
    expect(exit).toMatchObject({ code: null, signal: 'SIGKILL' });
    expect(exit.notStarted).toBeUndefined();
  });

  it('kills a tool that ignores SIGTERM with SIGKILL once its signal is aborted', async () => {
    const abort = new AbortController();
    const { tool, ready } = stubborn(abort.signal);
    await ready;
    abort.abort();
    expect(await tool.exit).toMatchObject({ code: null, signal: 'SIGKILL' });
  });

  it('reports a tool that is not installed as not started, and resolves its exit', async () => {
    const tool = startTool('ina-no-such-tool', ['--help']);
    const exit = await tool.exit;
    expect(exit.notStarted).toMatch(/ina-no-such-tool could not be started/);
  });

  it('reports a tool that is there but not executable as not started', async () => {
    const dir = await mkdtemp(join(tmpdir(), 'ina-exec-'));
    try {
      const file = join(dir, 'not-executable');
      await writeFile(file, '#!/bin/sh\nexit 0\n', { mode: 0o644 });
      const exit = await startTool(file, []).exit;
      expect(exit.notStarted).toMatch(/not-executable could not be started: Permission denied/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it('resolves exit (never rejects) for a tool that fails, is killed, or loses its reader', async () => {
    const failing = startTool('sh', ['-c', 'echo oops >&2; exit 3'], { stdout: 'ignore' });
    expect(await failing.exit).toEqual({ code: 3, signal: null, stderr: 'oops' });
    const killed = startTool('sleep', ['60'], { stdout: 'ignore' });
    killed.kill('SIGKILL');
    expect(await killed.exit).toMatchObject({ code: null, signal: 'SIGKILL' });
    const cut = startTool('sh', ['-c', 'while :; do echo y; done']);
    cut.stdout!.destroy();
    await expect(cut.exit).resolves.toMatchObject({ signal: 'SIGPIPE' });
  });

  it('hands bytes from one tool to the next whole', async () => {
    const bytes = randomBytes(3 * 1024 * 1024 + 17);
    const first = startTool('cat', []);
    const second = startTool('sha256sum', [], { stdin: first.stdout! });
    // the agent's own end of the pipe, as decoder-pipe.ts does: the kernel carries the bytes, not the agent
    first.stdout!.destroy();
    let digest = '';
    second.stdout!.setEncoding('utf8').on('data', (text: string) => (digest += text));
    first.stdin!.end(bytes);
    const [a, b] = await Promise.all([first.exit, second.exit]);
    expect([a.code, b.code]).toEqual([0, 0]);
    expect(digest.split(' ')[0]).toBe(createHash('sha256').update(bytes).digest('hex'));
  });
});
