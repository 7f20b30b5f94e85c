// log.collect_system_logs over the real API: the base64 result decodes to a gzipped tar with the
// expected members, and the agent's own log lines are in it.
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { createAgent } from '../../agent/agent.ts';
import { buildConfig } from '../../agent/config/config.ts';
import { createLogger } from '../../agent/log.ts';
import { AgentClient } from '../helpers/agent-client.ts';

describe('log.collect_system_logs', () => {
  it('returns a base64 gzipped tar of the agent log, kernel log, block devices, network and mounts', async () => {
    const config = buildConfig(
      new Map(),
      new Map([
        ['standalone', 'true'],
        ['ipa-listen-host', '127.0.0.1'],
        ['ipa-listen-port', '0'],
        ['device-allowlist', '/dev/null'],
      ]),
    );
    const { log: logger, ring } = createLogger({ debug: false, quiet: true });
    const agent = createAgent(config, logger, { logRing: ring });
    const server = await agent.listen();
    const client = new AgentClient({ url: `http://127.0.0.1:${server.port}` });
    const work = await mkdtemp(join(tmpdir(), 'ina-logs-test-'));
    try {
      logger.info({ marker: 'collect-me-7f3a' }, 'a line the archive must hold');
      const r = await client.command('log.collect_system_logs', {}, { wait: true });
      expect(r.command_status).toBe('SUCCEEDED');
      const b64 = (r.command_result as { system_logs: string }).system_logs;
      expect(b64).toMatch(/^[A-Za-z0-9+/]+=*$/);
      const archive = join(work, 'logs.tar.gz');
      await writeFile(archive, Buffer.from(b64, 'base64'));
      const members = (await execa('tar', ['-tzf', archive])).stdout.split('\n').map((m) => m.replace(/^\.\//, ''));
      for (const m of [
        'agent.log',
        'dmesg',
        'lsblk',
        'lsblk-json',
        'blkid',
        'ip_addr',
        'ip_route',
        'mounts',
        'df',
        'ps',
      ]) {
        expect(members).toContain(m);
      }
      await execa('tar', ['-xzf', archive, '-C', work]);
      expect(await readFile(join(work, 'agent.log'), 'utf8')).toContain('collect-me-7f3a');
      expect(await readFile(join(work, 'mounts'), 'utf8')).toMatch(/ \/ /);
      expect(await readFile(join(work, 'lsblk'), 'utf8')).toMatch(/NAME/);
    } finally {
      await rm(work, { recursive: true, force: true });
      await client.close();
      await server.close();
    }
  });
});
