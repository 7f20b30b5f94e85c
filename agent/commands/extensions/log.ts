// log: collect_system_logs, what the conductor stores when a deploy or clean fails: the system logs archive
// (host/system-logs.ts), base64 encoded.
import { command, type Extension } from '../types.ts';
import { collectSystemLogs } from '../../host/system-logs.ts';

export const log: Extension = {
  collect_system_logs: command({
    mode: 'sync',
    parse: () => undefined,
    run: async (_p, ctx) => ({ system_logs: (await collectSystemLogs(ctx.log, ctx.logRing)).toString('base64') }),
  }),
};
