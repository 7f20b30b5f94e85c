// The buffer's memory check under a memory cgroup, v1 and v2, over fake cgroup trees shaped as the kernel
// shows them: the tightest limit of the agent's cgroup and its ancestors, page cache it may drop not counted.
import { mkdir, mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { availableMemory, cgroupRoom, type MemoryPaths } from '../../agent/host/memory.ts';
import { bufferBudget } from '../../agent/image/buffer.ts';

const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
let root: string;
let paths: MemoryPaths;

beforeEach(async () => {
  root = await mkdtemp(join(tmpdir(), 'ina-cgroup-'));
  paths = { meminfo: join(root, 'meminfo'), selfCgroup: join(root, 'self-cgroup'), cgroupRoot: join(root, 'sys') };
  await writeFile(paths.meminfo, `MemTotal:       25165824 kB\nMemAvailable:   ${(16 * GiB) / 1024} kB\n`);
});
afterEach(async () => {
  await rm(root, { recursive: true, force: true });
});

async function files(dir: string, entries: Record<string, string>): Promise<void> {
  await mkdir(dir, { recursive: true });
  for (const [name, value] of Object.entries(entries)) await writeFile(join(dir, name), value);
}

describe('cgroup v2', () => {
  beforeEach(async () => {
    await files(paths.cgroupRoot, { 'cgroup.controllers': 'cpu memory io\n' });
    await writeFile(paths.selfCgroup, '0::/kubepods/pod1/agent\n');
  });

  it('the room below the agent cgroup limit, less than MemAvailable', async () => {
    await files(join(paths.cgroupRoot, 'kubepods'), { 'memory.max': 'max\n', 'memory.current': `${4 * GiB}\n` });
    await files(join(paths.cgroupRoot, 'kubepods/pod1'), {
      'memory.max': `${2 * GiB}\n`,
      'memory.current': `${600 * MiB}\n`,
    });
    await files(join(paths.cgroupRoot, 'kubepods/pod1/agent'), {
      'memory.max': `${1 * GiB}\n`,
      'memory.current': `${500 * MiB}\n`,
      'memory.stat': `anon 104857600\nfile 419430400\ninactive_file ${100 * MiB}\nactive_file 0\n`,
    });
    // 1 GiB - (500 - 100 inactive) MiB = 624 MiB; the pod has 1448 MiB left.
    expect(await cgroupRoom(paths)).toBe(624 * MiB);
    expect(await availableMemory(paths)).toEqual({ bytes: 624 * MiB, limitedBy: 'cgroup' });
  });

  it('an ancestor tighter than the leaf wins; no limit anywhere is no cgroup room', async () => {
    await files(join(paths.cgroupRoot, 'kubepods/pod1'), {
      'memory.max': `${512 * MiB}\n`,
      'memory.current': `${400 * MiB}\n`,
    });
    await files(join(paths.cgroupRoot, 'kubepods/pod1/agent'), {
      'memory.max': 'max\n',
      'memory.current': `${300 * MiB}\n`,
    });
    expect(await cgroupRoom(paths)).toBe(112 * MiB);
    await files(join(paths.cgroupRoot, 'kubepods/pod1'), { 'memory.max': 'max\n' });
    expect(await cgroupRoom(paths)).toBeNull();
    expect(await availableMemory(paths)).toEqual({ bytes: 16 * GiB, limitedBy: 'host' });
  });

  it('inside a cgroup namespace the path is "/" and the mount is the agent cgroup itself', async () => {
    await writeFile(paths.selfCgroup, '0::/\n');
    await files(paths.cgroupRoot, { 'memory.max': `${768 * MiB}\n`, 'memory.current': `${256 * MiB}\n` });
    expect(await cgroupRoom(paths)).toBe(512 * MiB);
  });
});

describe('cgroup v1', () => {
  it('memory.limit_in_bytes less usage (inactive file pages not counted); the unlimited value is no limit', async () => {
    await writeFile(paths.selfCgroup, '9:name=systemd:/\n4:memory:/docker/abc\n1:cpu,cpuacct:/\n0::/\n');
    const memory = join(paths.cgroupRoot, 'memory');
    await files(memory, { 'memory.limit_in_bytes': '9223372036854771712\n', 'memory.usage_in_bytes': `${8 * GiB}\n` });
    await files(join(memory, 'docker'), {
      'memory.limit_in_bytes': '9223372036854771712\n',
      'memory.usage_in_bytes': `${3 * GiB}\n`,
    });
    await files(join(memory, 'docker/abc'), {
      'memory.limit_in_bytes': `${2 * GiB}\n`,
      'memory.usage_in_bytes': `${1536 * MiB}\n`,
      'memory.stat': `cache 0\ntotal_inactive_file ${512 * MiB}\n`,
    });
    expect(await cgroupRoom(paths)).toBe(1 * GiB);
    await files(join(memory, 'docker/abc'), { 'memory.limit_in_bytes': '9223372036854771712\n' });
    expect(await cgroupRoom(paths)).toBeNull();
  });

  it('a container that sees its own cgroup as the mount root', async () => {
    await writeFile(paths.selfCgroup, '4:memory:/docker/abc\n');
    await files(join(paths.cgroupRoot, 'memory'), {
      'memory.limit_in_bytes': `${256 * MiB}\n`,
      'memory.usage_in_bytes': `${200 * MiB}\n`,
    });
    expect(await cgroupRoom(paths)).toBe(56 * MiB);
  });
});

it('the buffer check on tmpfs refuses an image that fits in MemAvailable but not below the cgroup limit', async () => {
  await files(paths.cgroupRoot, { 'cgroup.controllers': 'memory\n' });
  await writeFile(paths.selfCgroup, '0::/pod\n');
  await files(join(paths.cgroupRoot, 'pod'), { 'memory.max': `${1 * GiB}\n`, 'memory.current': `${200 * MiB}\n` });
  // /dev/shm is tmpfs; the image is smaller than its free space and than MemAvailable (16 GiB, faked).
  await expect(bufferBudget('/dev/shm', 900 * MiB, paths)).rejects.toThrow(
    /room below the agent's memory cgroup limit/,
  );
  const budget = await bufferBudget('/dev/shm', 100 * MiB, paths);
  expect(budget.limit).toBeLessThanOrEqual(1 * GiB - 200 * MiB);
});
