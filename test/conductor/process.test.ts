// The real agent process (`tsx agent/main.ts`) against the fake conductor: a conductor that never
// answers ends it with a non-zero exit and one line on stderr; a working one gets a lookup and an
// HTTPS heartbeat before the API is used, and SIGTERM stops it cleanly.
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { FakeConductor } from '../helpers/fake-conductor.ts';

let dir: string;
let cmdline: string;
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-conductor-'));
  cmdline = join(dir, 'cmdline');
  await writeFile(cmdline, 'BOOT_IMAGE=/vmlinuz quiet\n');
});
afterAll(() => rm(dir, { recursive: true, force: true }));

/** The agent on the Node running the tests (the pinned one), directly, so that signals reach it. */
function agentProcess(apiUrl: string, extra: string[] = []) {
  const args = [
    `--kernel-cmdline=${cmdline}`,
    `--ipa-api-url=${apiUrl}`,
    '--ipa-listen-host=127.0.0.1',
    '--ipa-listen-port=0',
    '--ipa-nic-wait-timeout=0',
    '--device-allowlist=/dev/null',
    ...extra,
  ];
  return execa(process.execPath, ['--import', 'tsx', 'agent/main.ts', ...args], { reject: false, timeout: 60_000 });
}

const macs = await nicMacs();
if (macs.length === 0)
  console.warn(`${import.meta.url}: tests needing a NIC skipped: no physical NIC with a MAC in /sys/class/net`);

describe('agent process and the conductor', () => {
  it('exits non-zero with a one-line reason when the conductor never answers', async () => {
    const fake = await FakeConductor.start({ nodes: [] });
    fake.mode = 'hang';
    try {
      const r = await agentProcess(fake.url, [
        '--ipa-lookup-timeout=1',
        '--ipa-lookup-interval=0.2',
        '--ipa-http-request-timeout=1',
      ]);
      expect(r.exitCode).toBe(1);
      const lines = r.stderr.trim().split('\n');
      expect(lines).toHaveLength(1);
      expect(lines[0]).toMatch(
        /^ironic-node-agent: Could not look up node info after \d+ attempt\(s\) in 1 s; last: no answer from http:\/\/127\.0\.0\.1:\d+: .*timeout/i,
      );
    } finally {
      await fake.close();
    }
  });

  it.skipIf(macs.length === 0)('stops cleanly on SIGTERM while still looking up', async () => {
    const fake = await FakeConductor.start({ nodes: [] });
    const proc = agentProcess(fake.url, ['--ipa-lookup-interval=0.2']);
    try {
      await fake.waitFor(() => fake.lookups.length >= 1, 'a lookup', 40_000);
      proc.kill('SIGTERM');
      const r = await proc;
      expect(r.exitCode).toBe(0);
      expect(r.stdout).toMatch(/"msg":"stopping"/);
    } finally {
      proc.kill('SIGKILL');
      await fake.close();
    }
  });

  it.skipIf(macs.length === 0)('looks up, serves HTTPS, heartbeats, and stops on SIGTERM', async () => {
    const fake = await FakeConductor.start({ nodes: [{ macs }] });
    const node = [...fake.nodes.values()][0]!;
    const proc = agentProcess(fake.url);
    try {
      await fake.waitFor(() => fake.heartbeats.some((h) => h.status === 202), 'a heartbeat from the process', 40_000);
      expect(node.internal.agent_url).toMatch(/^https:\/\/127\.0\.0\.1:\d+$/);
      const client = fake.clientFor(node.uuid);
      expect(await client.commands()).toEqual([]);
      await client.close();
      proc.kill('SIGTERM');
      const r = await proc;
      expect(r.exitCode).toBe(0);
    } finally {
      proc.kill('SIGKILL');
      await fake.close();
    }
  });
});
