// burnin_disk and burnin_network with fio, in IPA's shapes. Disk: a verified 4k read/write job per disk
// (destructive), over the cleaning targets (allow-listed, not mounted, not read-only, not skip-listed).
// Network: a pair of nodes streams over fio's net engine for a time, then the roles swap; the partner comes
// from a static `agent_burnin_fio_network_config` (IPA's dynamic pairing needs tooz, which is not here).
import { setTimeout as sleep } from 'node:timers/promises';
import { CleaningError, CommandExecutionError, ToolError, errorText } from '../errors.ts';
import { hasTool, run } from '../exec.ts';
import type { TaskContext as CommandContext } from '../services.ts';
import { cleaningTargets } from '../disk/clean-targets.ts';
import { boolSetting, intSetting, objectSetting, optPath } from './settings.ts';

/** fio's net engine port, as IPA's. */
export const NETWORK_PORT = 9000;
/**
 * fio is optional: Debian's build links Ceph, GlusterFS and RDMA libraries (about 63 MiB more in the ramdisk), so
 * the default ramdisk leaves it out (docs/ironic-compat.md) and these steps fail saying so, before touching anything.
 */
async function requireFio(what: string): Promise<void> {
  if (!(await hasTool('fio'))) {
    throw new CommandExecutionError(
      `fio (${what}) failed with error: fio is not in this ramdisk (add it to image-build/files.txt to run ${what} burn-in)`,
    );
  }
}

/** How long a reader keeps knocking while its partner's writer is not listening yet. */
const READER_WAIT_MS = 300_000;
const READER_RETRY_MS = 2_000;

export function fioDiskArgs(info: Record<string, unknown>, devices: readonly string[]): string[] {
  const loops = intSetting(info, 'agent_burnin_fio_disk_loops', 4, 1);
  const runtime = intSetting(info, 'agent_burnin_fio_disk_runtime', 0, 0);
  const output = optPath(info, 'agent_burnin_fio_disk_outputfile');
  if (boolSetting(info, 'agent_burnin_fio_disk_smart_test')) {
    throw new CleaningError(
      'driver_info.agent_burnin_fio_disk_smart_test: SMART self-tests need smartctl, which this ramdisk does not carry',
    );
  }
  return [
    '--rw',
    'readwrite',
    '--bs',
    '4k',
    '--direct',
    '1',
    '--ioengine',
    'libaio',
    '--iodepth',
    '32',
    '--verify',
    'crc32c',
    '--verify_dump',
    '1',
    '--continue_on_error',
    'verify',
    '--loops',
    String(loops),
    // no resumable-verify state file in the working folder (it would land in / of the ramdisk)
    '--verify_state_save',
    '0',
    // runtime 0 means "no time limit": the loops alone bound the run (fio would otherwise run forever)
    ...(runtime > 0 ? ['--runtime', String(runtime), '--time_based'] : []),
    ...(output ? ['--output-format', 'json', '--output', output] : []),
    // one job per disk, named after it as IPA names them, and writing the disk itself (a job without a
    // filename would make files named after the job instead)
    ...devices.flatMap((d) => ['--name', d, '--filename', d]),
  ];
}

export async function fioDisk(ctx: CommandContext, info: Record<string, unknown>): Promise<null> {
  const { targets } = await cleaningTargets(ctx, 'skip', 'ignore');
  const args = fioDiskArgs(
    info,
    targets.map((d) => d.path),
  );
  if (targets.length === 0) {
    ctx.log.info('burn-in (disk): no disk to exercise');
    return null;
  }
  await requireFio('disk');
  ctx.log.info({ disks: targets.map((d) => d.path), args }, 'burn-in (disk): fio');
  try {
    await run('fio', args, { log: ctx.log, timeoutMs: 0, signal: ctx.signal });
  } catch (err) {
    throw new CommandExecutionError(`fio (disk) failed with error ${errorText(err)}`);
  }
  ctx.log.info({ disks: targets.map((d) => d.path) }, 'burn-in (disk) passed');
  return null;
}

export interface NetworkPlan {
  role: 'writer' | 'reader';
  partner: string;
  runtimeS: number;
  output?: string;
}

export function networkPlan(info: Record<string, unknown>): NetworkPlan {
  const runtimeS = intSetting(info, 'agent_burnin_fio_network_runtime', 21_600, 1);
  const output = optPath(info, 'agent_burnin_fio_network_outputfile');
  const config = objectSetting(info, 'agent_burnin_fio_network_config');
  if (!config) {
    const how =
      info.agent_burnin_fio_network_pairing_backend_url !== undefined
        ? 'dynamic pairing (a tooz backend) is not supported by this agent: '
        : '';
    throw new CleaningError(
      `burnin_network needs a partner: ${how}set driver_info.agent_burnin_fio_network_config to {"role": "writer"|"reader", "partner": "<host>"}`,
    );
  }
  const { role, partner } = config;
  if (role !== 'writer' && role !== 'reader')
    throw new CleaningError(
      `agent_burnin_fio_network_config: role must be writer or reader, got ${JSON.stringify(role)}`,
    );
  if (typeof partner !== 'string' || !/^[\w.:-]+$/.test(partner)) {
    throw new CleaningError(
      `agent_burnin_fio_network_config: partner must be a host name or address, got ${JSON.stringify(partner)}`,
    );
  }
  return { role, partner, runtimeS, ...(output ? { output } : {}) };
}

export function fioNetworkArgs(plan: NetworkPlan, writer: boolean): string[] {
  return [
    '--ioengine',
    'net',
    '--port',
    String(NETWORK_PORT),
    '--fill_device',
    '1',
    '--group_reporting',
    '--gtod_reduce',
    '1',
    '--numjobs',
    '16',
    ...(writer
      ? ['--name', 'writer', '--rw', 'write', '--runtime', String(plan.runtimeS), '--time_based', '--listen']
      : ['--name', 'reader', '--rw', 'read', '--hostname', plan.partner]),
    ...(plan.output ? ['--output-format', 'json', '--output', plan.output] : []),
  ];
}

async function oneDirection(ctx: CommandContext, plan: NetworkPlan, writer: boolean): Promise<void> {
  const args = fioNetworkArgs(plan, writer);
  const deadline = Date.now() + READER_WAIT_MS;
  for (;;) {
    try {
      await run('fio', args, { log: ctx.log, timeoutMs: (plan.runtimeS + 600) * 1000, signal: ctx.signal });
      return;
    } catch (err) {
      // the partner's writer may not listen yet: a reader knocks again (IPA retries fio's exit 16 likewise)
      const refused = err instanceof ToolError && /exit code 16|onnection refused/.test(err.details);
      if (writer || !refused || Date.now() > deadline || ctx.signal.aborted) {
        throw new CommandExecutionError(
          `fio (network, ${writer ? 'writer' : 'reader'}) failed with error ${errorText(err)}`,
        );
      }
      await sleep(READER_RETRY_MS);
    }
  }
}

export async function fioNetwork(ctx: CommandContext, info: Record<string, unknown>): Promise<null> {
  const plan = networkPlan(info);
  await requireFio('network');
  ctx.log.info({ plan }, `burn-in (network): ${plan.role} with ${plan.partner} for ${plan.runtimeS} s each way`);
  await oneDirection(ctx, plan, plan.role === 'writer');
  ctx.log.info('burn-in (network): first direction done, swapping roles');
  await oneDirection(ctx, plan, plan.role !== 'writer');
  ctx.log.info('burn-in (network) passed');
  return null;
}
