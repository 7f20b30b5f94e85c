// burnin_cpu and burnin_memory: stress-ng for a time, as IPA runs it (`--cpu`/`--vm` workers, 0 = one per
// CPU, `--metrics-brief`, optionally `--log-file`). A non-zero exit fails the step with stress-ng's output.
import { CommandExecutionError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { TaskContext as CommandContext } from '../services.ts';
import { intSetting, optPath, vmBytes } from './settings.ts';

const DAY_S = 86_400;

/** The stress-ng argv for a step, from driver_info (validated: a bad value throws before anything runs). */
export function stressArgs(
  kind: 'cpu' | 'memory',
  info: Record<string, unknown>,
): { args: string[]; timeoutS: number } {
  if (kind === 'cpu') {
    const workers = intSetting(info, 'agent_burnin_cpu_cpu', 0, 0);
    const timeoutS = intSetting(info, 'agent_burnin_cpu_timeout', DAY_S, 1);
    const log = optPath(info, 'agent_burnin_cpu_outputfile');
    return {
      args: [
        '--cpu',
        String(workers),
        '--timeout',
        String(timeoutS),
        '--metrics-brief',
        ...(log ? ['--log-file', log] : []),
      ],
      timeoutS,
    };
  }
  const workers = intSetting(info, 'agent_burnin_vm_vm', 0, 0);
  const bytes = vmBytes(info, 'agent_burnin_vm_vm-bytes', '98%');
  const timeoutS = intSetting(info, 'agent_burnin_vm_timeout', DAY_S, 1);
  const log = optPath(info, 'agent_burnin_vm_outputfile');
  return {
    args: [
      '--vm',
      String(workers),
      '--timeout',
      String(timeoutS),
      '--vm-bytes',
      bytes,
      '--metrics-brief',
      ...(log ? ['--log-file', log] : []),
    ],
    timeoutS,
  };
}

export async function stressNg(
  ctx: CommandContext,
  kind: 'cpu' | 'memory',
  info: Record<string, unknown>,
): Promise<null> {
  const { args, timeoutS } = stressArgs(kind, info);
  ctx.log.info({ args }, `burn-in (${kind}): stress-ng for ${timeoutS} s`);
  try {
    // stress-ng stops its workers at --timeout; the margin covers their teardown
    const r = await run('stress-ng', args, { log: ctx.log, timeoutMs: (timeoutS + 120) * 1000, signal: ctx.signal });
    ctx.log.info({ output: (r.stderr || r.stdout).split('\n').slice(-12) }, `burn-in (${kind}) passed`);
  } catch (err) {
    throw new CommandExecutionError(`stress-ng (${kind}) failed with error ${errorText(err)}`);
  }
  return null;
}
