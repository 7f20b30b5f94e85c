// A scratch directory for the running test, removed when that test ends, passed or failed, so that no run
// leaves a folder in the system's temporary directory. Code outside a test uses agent/host/temp-dir.ts.
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { onTestFinished } from 'vitest';

export async function testTempDir(prefix: string): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), prefix));
  onTestFinished(() => rm(dir, { recursive: true, force: true }));
  return dir;
}
