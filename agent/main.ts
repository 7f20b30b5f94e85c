// The agent process: read the configuration once, then serve (and, with a conductor, link to it).
import { createAgent } from './agent.ts';
import { loadConfig, type Config } from './config/config.ts';
import { ConfigError } from './config/reader.ts';
import { FlagSyntaxError } from './config/sources.ts';
import { createLogger } from './log.ts';
import { mirrorStatus } from './status-file.ts';

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

async function main(): Promise<void> {
  const config = readConfig();
  const log = createLogger({ debug: config.debug, file: config.logFile });
  const agent = createAgent(config, log);
  const { state } = agent.services;

  agent.services.host.on('simulated-restart', (action) => {
    log.info({ action }, 'simulated power action: starting over as a freshly booted agent');
    agent.executor.reset();
    state.setToken(config.token.agentToken ?? null);
  });

  if (config.statusFile) mirrorStatus(config.statusFile, state, agent.executor);
  const server = await agent.listen();
  state.update({ phase: 'serving' });
  log.info({ port: server.port, standalone: config.standalone, allowlist: config.disks.allowlist }, 'agent API listening');

  const stop = async (signal: string) => {
    log.info({ signal }, 'stopping');
    await server.close();
    process.exit(0);
  };
  process.on('SIGTERM', () => void stop('SIGTERM'));
  process.on('SIGINT', () => void stop('SIGINT'));
}

main().catch((err: unknown) => {
  process.stderr.write(`ironic-node-agent: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(1);
});
