// A real Ironic per test file, started and stopped by its harness (only what it started): Debian's 21.4
// (scripts/ironic-standalone, the host's packages) or the newest, sid's 39.0 (scripts/ironic-sid, a cached
// chroot in its own mount + PID namespaces), chosen by INA_IRONIC=21.4|sid (default 21.4).
import { mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { execa } from 'execa';
import { inject } from 'vitest';
import { noteStarted } from './leftovers.ts';

export type IronicKind = '21.4' | 'sid';

const SCRIPTS: Record<IronicKind, string> = {
  '21.4': resolve(import.meta.dirname, '../../../scripts/ironic-standalone'),
  sid: resolve(import.meta.dirname, '../../../scripts/ironic-sid'),
};

/** The conductor this run drives: INA_IRONIC, default 21.4. */
export function ironicKind(): IronicKind {
  const v = process.env.INA_IRONIC ?? '21.4';
  if (v !== '21.4' && v !== 'sid') throw new Error(`INA_IRONIC must be 21.4 or sid, not ${v}`);
  return v;
}

export interface IronicOptions {
  /** Which conductor; default INA_IRONIC (ironicKind()). The VM tests (test/e2e/ironic-vm.ts) need sid. */
  kind?: IronicKind;
  mode?: 'single' | 'split';
  fastTrack?: boolean;
  /** [agent]require_tls; default: the conductor's own default (21.4: false, sid: true). */
  requireTls?: boolean;
  /** [agent]image_download_source (default http) and [DEFAULT]force_raw_images (default true). */
  downloadSource?: 'http' | 'local';
  forceRaw?: boolean;
  /** ini text appended to the sid conductor's ironic.conf (sid only: scripts/ironic-sid IRONIC_EXTRA_CONF). */
  extraConf?: string;
}

export interface RunningIronic {
  kind: IronicKind;
  url: string;
  /** [deploy]http_url: the conductor's own HTTP server (image_download_source=local serves images there). */
  httpUrl: string;
  runDir: string;
  requireTls: boolean;
  /** The `baremetal` CLI for this conductor: the host's for 21.4, the chroot's own for sid. */
  cli: string[];
  /** OS_* variables that point the `baremetal` CLI at this Ironic with noauth. */
  cliEnv: Record<string, string>;
  /** The API microversion the suite speaks to this conductor. */
  apiVersion: string;
  /** The conductor's log (single process: the one `ironic` log). */
  conductorLog(): Promise<string>;
  /** The API's log, where every request the agent makes is a line. */
  apiLog(): Promise<string>;
  stop(): Promise<void>;
}

export async function startIronic(opts: IronicOptions = {}): Promise<RunningIronic> {
  const kind = opts.kind ?? ironicKind();
  const scripts = SCRIPTS[kind];
  const runDir = await mkdtemp(join(tmpdir(), 'ina-ironic-'));
  const mode = opts.mode ?? (process.env.INA_IRONIC_MODE === 'split' ? 'split' : 'single');
  const requireTls = opts.requireTls ?? kind === 'sid';
  const extraConf = opts.extraConf === undefined ? undefined : join(runDir, 'extra.conf');
  if (extraConf) await writeFile(extraConf, opts.extraConf!);
  const env = {
    ...(extraConf ? { IRONIC_EXTRA_CONF: extraConf } : {}),
    IRONIC_MODE: mode,
    IRONIC_FAST_TRACK: String(opts.fastTrack ?? true),
    IRONIC_REQUIRE_TLS: String(requireTls),
    IRONIC_DOWNLOAD_SOURCE: opts.downloadSource ?? 'http',
    IRONIC_FORCE_RAW: String(opts.forceRaw ?? true),
  };
  // noted before start.sh returns: a hook that times out meanwhile must not leave this Ironic running
  noteStarted(inject('leftoversFile'), { kind: 'ironic', runDir, stop: join(scripts, 'stop.sh') });
  // python-requests takes REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE over a session's own CA file, so a bundle named
  // in the caller's environment would silently replace the conductor's [oci]verify_ca
  const inherited = Object.fromEntries(
    Object.entries(process.env).filter(([k]) => k !== 'REQUESTS_CA_BUNDLE' && k !== 'CURL_CA_BUNDLE'),
  );
  const started = await execa('bash', [join(scripts, 'start.sh'), runDir], {
    env: { ...inherited, ...env },
    extendEnv: false,
    reject: false,
  });
  if (started.exitCode !== 0) {
    await rm(runDir, { recursive: true, force: true });
    throw new Error(`${scripts}/start.sh failed (exit ${started.exitCode}):\n${started.stderr}`);
  }
  const url = started.stdout.trim();
  const apiVersion = kind === 'sid' ? '1.115' : '1.82';
  const httpUrl = (await readFile(join(runDir, 'http-url'), 'utf8')).trim();
  const logOf = (name: string) => () => readFile(join(runDir, 'log', name), 'utf8').catch(() => '');
  return {
    kind,
    url,
    httpUrl,
    runDir,
    requireTls,
    cli: kind === 'sid' ? ['bash', join(scripts, 'baremetal.sh')] : ['baremetal'],
    cliEnv: { OS_AUTH_TYPE: 'none', OS_ENDPOINT: url, OS_BAREMETAL_API_VERSION: apiVersion },
    apiVersion,
    conductorLog: logOf(mode === 'single' ? 'ironic.log' : 'ironic-conductor.log'),
    apiLog: logOf(mode === 'single' ? 'ironic.log' : 'ironic-api.log'),
    stop: async () => {
      await execa('bash', [join(scripts, 'stop.sh'), runDir], { reject: false });
      if (!process.env.INA_KEEP_IRONIC_RUN) await rm(runDir, { recursive: true, force: true });
    },
  };
}
