// Before the e2e suite: make sure QEMU is installed (Debian's qemu-system-x86, when missing) and build
// the ramdisk, so the test always boots what the sources say now (an unchanged build is kept as is).
// It also gives the files the Ironic suite's list of started things (test/ironic/support/leftovers.ts): a file
// that runs a real Ironic for its VM (ironic-vm.ts) notes it there, and the teardown stops what a dead
// worker left running.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { leftoversFileIn, stopLeftovers } from '../ironic/support/leftovers.ts';

const repo = join(import.meta.dirname, '..', '..');

function hasCommand(cmd: string): boolean {
  try {
    execFileSync('sh', ['-c', `command -v ${cmd}`], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

export default function setup(project: TestProject): () => void {
  if (!hasCommand('qemu-system-x86_64')) {
    process.stderr.write('e2e setup: installing qemu-system-x86\n');
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    // the project's apt-get, which waits its turn (.ci/run builds caches beside the suites)
    const aptGet = join(repo, 'scripts', 'lib', 'apt-get.sh');
    execFileSync(aptGet, ['update', '-qq'], { stdio: 'inherit', env });
    execFileSync(aptGet, ['install', '-y', '-qq', '--no-install-recommends', 'qemu-system-x86'], {
      stdio: 'inherit',
      env,
    });
  }
  // The suite's own hardware manager plugin goes into the ramdisk as an operator's would (the full loop bakes in
  // the same folder, so both boot one build).
  execFileSync('bash', [join(repo, 'image-build', 'build.sh')], {
    stdio: 'inherit',
    env: { ...process.env, INA_HARDWARE_MANAGERS: join(repo, 'test', 'e2e', 'hardware-managers') },
  });
  for (const f of ['vmlinuz', 'initramfs.img', 'manifest.json']) {
    if (!existsSync(join(repo, 'image-build', 'out', f)))
      throw new Error(`e2e setup: the build made no image-build/out/${f}`);
  }
  const dir = mkdtempSync(join(tmpdir(), 'ina-e2e-suite-'));
  const leftovers = leftoversFileIn(dir);
  project.provide('leftoversFile', leftovers);
  return () => {
    for (const what of stopLeftovers(leftovers)) process.stdout.write(`stopped a leftover: ${what}\n`);
    rmSync(dir, { recursive: true, force: true });
  };
}
