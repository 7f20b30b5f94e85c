// A real Ironic per test file, started and stopped by scripts/ironic-standalone (only what it started).
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { inject } from 'vitest';
import { noteStarted } from './leftovers.ts';

const SCRIPTS = resolve(import.meta.dirname, '../../../scripts/ironic-standalone');

export interface IronicOptions {
  mode?: 'single' | 'split';
  fastTrack?: boolean;
  requireTls?: boolean;
}

export interface RunningIronic {
  url: string;
  runDir: string;
  /** OS_* variables that point the `baremetal` CLI at this Ironic with noauth. */
  cliEnv: Record<string, string>;
  /** The conductor's log (single process: the one `ironic` log). */
  conductorLog(): Promise<string>;
  /** The API's log, where every request the agent makes is a line. */
  apiLog(): Promise<string>;
  stop(): Promise<void>;
}

export async function startIronic(opts: IronicOptions = {}): Promise<RunningIronic> {
  const runDir = await mkdtemp(join(tmpdir(), 'ina-ironic-'));
  const mode = opts.mode ?? (process.env.INA_IRONIC_MODE === 'split' ? 'split' : 'single');
  const env = {
    IRONIC_MODE: mode,
    IRONIC_FAST_TRACK: String(opts.fastTrack ?? true),
    IRONIC_REQUIRE_TLS: String(opts.requireTls ?? false),
  };
  const started = await execa('bash', [join(SCRIPTS, 'start.sh'), runDir], { env, reject: false });
  if (started.exitCode !== 0) {
    await rm(runDir, { recursive: true, force: true });
    throw new Error(`scripts/ironic-standalone/start.sh failed (exit ${started.exitCode}):\n${started.stderr}`);
  }
  noteStarted(inject('leftoversFile'), { kind: 'ironic', runDir });
  const url = started.stdout.trim();
  const logOf = (name: string) => () => readFile(join(runDir, 'log', name), 'utf8').catch(() => '');
  return {
    url,
    runDir,
    cliEnv: { OS_AUTH_TYPE: 'none', OS_ENDPOINT: url, OS_BAREMETAL_API_VERSION: '1.82' },
    conductorLog: logOf(mode === 'single' ? 'ironic.log' : 'ironic-conductor.log'),
    apiLog: logOf(mode === 'single' ? 'ironic.log' : 'ironic-api.log'),
    stop: async () => {
      await execa('bash', [join(SCRIPTS, 'stop.sh'), runDir], { reject: false });
      if (!process.env.INA_KEEP_IRONIC_RUN) await rm(runDir, { recursive: true, force: true });
    },
  };
}
