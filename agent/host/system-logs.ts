// The system logs archive: a gzipped tar of the agent's own log, the kernel log, block devices, network and
// mount state. `log.collect_system_logs` sends it to the conductor; the inspection's `logs` collector too.
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger, LogRing } from '../log.ts';
import { withTempDir } from './temp-dir.ts';

/** Member name → the command whose output it holds. */
const COMMANDS: Readonly<Record<string, readonly string[]>> = {
  journal: ['journalctl', '--full', '--no-pager', '-b'],
  dmesg: ['dmesg'],
  lsblk: [
    'lsblk',
    '--all',
    '--bytes',
    '--output',
    'NAME,KNAME,SIZE,TYPE,MODEL,SERIAL,WWN,ROTA,LOG-SEC,PHY-SEC,MOUNTPOINTS',
  ],
  'lsblk-json': ['lsblk', '--all', '--bytes', '--json', '--output-all'],
  blkid: ['blkid', '-o', 'full'],
  ip_addr: ['ip', 'addr'],
  ip_route: ['ip', 'route'],
  ip_route_v6: ['ip', '-6', 'route'],
  df: ['df', '-a'],
  ps: ['ps', 'au'],
};

const FILES: Readonly<Record<string, string>> = {
  mounts: '/proc/mounts',
  mdstat: '/proc/mdstat',
};

/** A command's output, or why there is none: one missing tool must not cost the whole archive. */
async function capture(argv: readonly string[], log: Logger): Promise<string> {
  try {
    const r = await run(argv[0]!, argv.slice(1), { log, timeoutMs: 30_000 });
    return r.stdout + (r.stderr ? `\n--- stderr ---\n${r.stderr}` : '');
  } catch (err) {
    return `could not collect: ${errorText(err)}\n`;
  }
}

/** The archive; its agent.log holds `agentLog`'s lines (the agent's own logger writes them). */
export async function collectSystemLogs(log: Logger, agentLog: LogRing): Promise<Buffer> {
  return withTempDir('ina-logs-', async (work) => {
    const tree = join(work, 'logs');
    await mkdir(tree);
    await writeFile(join(tree, 'agent.log'), `${agentLog.tail().join('\n')}\n`);
    for (const [name, argv] of Object.entries(COMMANDS)) await writeFile(join(tree, name), await capture(argv, log));
    for (const [name, path] of Object.entries(FILES)) {
      await writeFile(
        join(tree, name),
        await readFile(path, 'utf8').catch((err: Error) => `could not read ${path}: ${err.message}\n`),
      );
    }
    const archive = join(work, 'logs.tar.gz');
    await run('tar', ['-czf', archive, '-C', tree, '.'], { log });
    return await readFile(archive);
  });
}
