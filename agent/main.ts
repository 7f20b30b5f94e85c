// The agent process: read the configuration once, then serve (and, with a conductor, link to it).
import { CommandExecutionError } from './errors.ts';
import { createAgent, type Agent } from './agent.ts';
import { loadConfig, type Config } from './config/config.ts';
import { ConfigError } from './config/reader.ts';
import { ConductorLink } from './conductor/link.ts';
import { FlagSyntaxError } from './config/sources.ts';
import { createLogger, type Logger } from './log.ts';
import { installLastWords, previousCrash, restartLine } from './last-words.ts';
import { mirrorStatus, statusDocument, writeStatusSync } from './status-file.ts';
import { inspectWithoutConductor } from './inspect/without-conductor.ts';
import { cleanStaleBuffers } from './image/buffer.ts';
import { clearUnfinishedWrite } from './image/sinks/write-journal.ts';
import { loadHashAddon } from './image/image-hash.ts';
import { syncClock } from './host/clock-sync.ts';
import { startDebugLogin } from './host/debug-login.ts';
import { realClock } from './clock.ts';
import { liveDiskWait, waitForDisks } from './disk/block-devices.ts';
import { enableVlanInterfaces, liveVlanSetup } from './inspect/vlans.ts';

function readConfig(): Config {
  try {
    return loadConfig(process.argv.slice(2));
  } catch (err) {
    if (err instanceof ConfigError || err instanceof FlagSyntaxError) {
      process.stderr.write(`ironic-node-agent: ${err.message}\n`);
      process.exit(2);
    }
    throw err;
  }
}

function die(err: unknown): never {
  const text = err instanceof Error ? err.message : String(err);
  process.stderr.write(`ironic-node-agent: ${text.replace(/\s+/g, ' ').trim()}\n`);
  process.exit(1);
}

async function main(): Promise<void> {
  const config = readConfig();
  try {
    loadHashAddon();
  } catch (err) {
    die(err);
  }
  const { log, ring, flushSync: flushLog } = createLogger({ debug: config.debug, file: config.logFile });
  if (config.notActedOn.length > 0) {
    log.warn(
      { params: config.notActedOn },
      `accepted for IPA compatibility but not acted on: ${config.notActedOn.join(', ')}`,
    );
  }
  // First: an operator debugging this node can log in while the rest starts (or fails to).
  await startDebugLogin(config, log);
  // Before anything compares times: the auto-TLS certificate's validity, HTTPS servers' certificates.
  if (config.ntpServer) await syncClock(config.ntpServer, config.hostActions, log);
  // IPA's wait for a disk at start: storage drivers may still be finding their disks.
  await waitForDisks(await liveDiskWait(config, log, realClock));
  const agent = createAgent(config, log, { logRing: ring });
  const { state } = agent.services;
  installLastWords({ log, flushLog, state, executor: agent.executor, statusFile: config.statusFile });
  if (config.statusFile) {
    // Read before the mirror overwrites it: the previous run may have left its last words there.
    const previous = previousCrash(config.statusFile);
    if (previous) {
      const { crash, token, tls } = previous;
      // Lookup answers "******" for a token already handed out; the held one keeps the conductor link working.
      if (token && !state.agentToken) state.setToken(token);
      // Likewise the conductor keeps the first agent_verify_ca it was sent.
      if (tls) state.autoTls = tls;
      state.update({ restartedAfter: crash });
      process.stderr.write(`ironic-node-agent: ${restartLine(crash)}\n`);
      log.warn({ crash }, restartLine(crash));
    }
    mirrorStatus(config.statusFile, state, agent.executor);
  }
  // A previous run killed mid-deploy may have left an image buffer (RAM, on the ramdisk).
  await cleanStaleBuffers(config.image.bufferDir, log);
  // A previous run killed mid-write (SIGKILL, the OOM killer) left its device half written: cleared before serving.
  const cleared = await clearUnfinishedWrite(config.statusFile, agent.services.guard, log);
  if (cleared) process.stderr.write(`ironic-node-agent: ${cleared}\n`);

  if (config.standalone) {
    await enableVlanInterfaces(liveVlanSetup(config, log));
    const server = await agent.listen();
    agent.services.host.on('quiesce', (reason) => {
      void server.close();
      setInterval(() => undefined, 2 ** 30);
      state.update({ phase: reason === 'lockdown' ? 'locked down' : 'rescued' });
    });
    state.update({ phase: 'serving' });
    log.info({ port: server.port, standalone: true, allowlist: config.disks.allowlist }, 'agent API listening');
    stopOn(agent, config, log, flushLog, () => server.close());
  } else if (config.apiUrls.length === 0) {
    // Inspection without fast track: Ironic gave only the callback URL and powers the machine off afterwards.
    stopOn(agent, config, log, flushLog, async () => undefined);
    await inspectWithoutConductor(agent, config, log);
  } else {
    // Like IPA, the API starts only once lookup succeeded; a failed lookup ends the process. The link
    // handles simulated power actions itself (it boots again as a fresh agent).
    const link = new ConductorLink(agent, config, log, { onFatal: die });
    stopOn(agent, config, log, flushLog, () => link.stop());
    await link.start();
  }
}

/** How long a stopping agent waits for an interrupted command's tools to exit (a supervisor's KILL comes later). */
const CANCEL_GRACE_MS = 20_000;

function stopOn(
  agent: Agent,
  config: Config,
  log: Logger,
  flushLog: () => void,
  stopServing: () => Promise<void>,
): void {
  let stopping = false;
  const stop = async (signal: string) => {
    if (stopping) return;
    stopping = true;
    log.info({ signal }, 'stopping');
    const running = agent.executor.current();
    if (running?.status === 'RUNNING') {
      // The interrupted command is recorded as such (log, status file), its tools stopped and its disk
      // cleared as after a failed write, before the process goes.
      const name = `${running.extension}.${running.commandName}`;
      log.warn({ signal, command: name, id: running.id }, `${signal} during ${name}: cancelling it before stopping`);
      const cancelled = agent.executor.cancel(`the agent received ${signal} and stopped during this command`);
      await Promise.race([cancelled, new Promise((r) => setTimeout(r, CANCEL_GRACE_MS).unref())]);
      if (running.status === 'RUNNING') {
        running.finish(
          'FAILED',
          null,
          new CommandExecutionError(`the agent received ${signal} and stopped during this command`).toCommandError(),
        );
      }
      log.warn({ signal, command: name, id: running.id, error: running.error }, `${name} interrupted by ${signal}`);
      if (config.statusFile) {
        try {
          writeStatusSync(config.statusFile, statusDocument(agent.services.state, agent.executor));
        } catch (err) {
          log.warn({ err: (err as Error).message }, 'could not write the status file');
        }
      }
    }
    await stopServing();
    flushLog();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch(die);
