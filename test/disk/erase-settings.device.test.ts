// The erase settings in the node's driver_internal_info, through the real API on a loop device: an unusable
// value (iterations "abc", -1, 2.5, 1e300, 101; concurrency 0 or -3; zeroize "perhaps") fails erase_devices with
// InvalidCommandParamsError naming the key and the value, and not one byte of the disk changes. Values as text
// (set from a CLI) are read as the numbers and booleans they spell.
import { createHash } from 'node:crypto';
import { open, readFile } from 'node:fs/promises';
import pino from 'pino';
import { describe, expect, it } from 'vitest';
import { eraseSettingsFrom, MAX_ERASE_CONCURRENCY, MAX_ERASE_ITERATIONS } from '../../agent/disk/erase-settings.ts';
import type { AgentClient, CommandResult } from '../helpers/agent-client.ts';
import { builtinStep, hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import { withAgentOn } from '../helpers/agent-on-disks.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

const params = (name: string, info: Record<string, unknown>, args?: Record<string, unknown>) => ({
  step: { ...builtinStep('clean', name), ...(args ? { args } : {}) },
  node: { uuid: '2005a784-89ea-4482-b56a-65497029a47e', properties: {}, instance_info: {}, driver_internal_info: info },
  ports: [],
  clean_version: hardwareManagerVersions(),
});

const execute = (
  c: AgentClient,
  info: Record<string, unknown>,
  name = 'erase_devices',
  args?: Record<string, unknown>,
): Promise<CommandResult> => c.command('clean.execute_clean_step', params(name, info, args), { poll: true });

async function fill(dev: LoopDevice): Promise<void> {
  const fh = await open(dev.path, 'r+');
  await fh.write(Buffer.alloc(dev.sizeBytes, 0xa5), 0, dev.sizeBytes, 0);
  await fh.sync();
  await fh.close();
}

const digest = async (dev: LoopDevice) =>
  createHash('sha256')
    .update(await readFile(dev.path))
    .digest('hex');

const BAD: [string, unknown, string][] = [
  ['agent_erase_devices_iterations', 'abc', `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['agent_erase_devices_iterations', -1, `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['agent_erase_devices_iterations', 2.5, `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['agent_erase_devices_iterations', 1e300, `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['agent_erase_devices_iterations', MAX_ERASE_ITERATIONS + 1, `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['agent_erase_devices_iterations', true, `a whole number from 0 to ${MAX_ERASE_ITERATIONS}`],
  ['disk_erasure_concurrency', 0, 'a whole number from 1 to 9007199254740991'],
  ['disk_erasure_concurrency', -3, 'a whole number from 1 to 9007199254740991'],
  ['disk_erasure_concurrency', '2.5', 'a whole number from 1 to 9007199254740991'],
  ['agent_erase_devices_zeroize', 'perhaps', 'true or false'],
  ['agent_erase_devices_zeroize', 2, 'true or false'],
  ['agent_enable_nvme_secure_erase', 'sometimes', 'true or false'],
  ['agent_continue_if_ata_erase_failed', {}, 'true or false'],
  ['agent_erase_skip_read_only', [], 'true or false'],
];

describe('erase settings from driver_internal_info', () => {
  it('an unusable value fails the step with InvalidCommandParamsError before any disk is touched', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      const before = await digest(d!);
      // Discard off: had a refusal been missed, the overwrite (not a lying discard) would change the disk.
      await withAgentOn([d!], { 'ipa-erase-discard': 'false' }, async (c) => {
        for (const [key, value, want] of BAD) {
          for (const step of ['erase_devices', 'erase_devices_express']) {
            const r = await execute(c, { agent_erase_devices_iterations: 1, [key]: value }, step);
            expect(r.command_status, `${step} ${key}=${String(value)}`).toBe('FAILED');
            expect(r.command_error).toEqual({
              type: 'InvalidCommandParamsError',
              code: 400,
              message: 'Invalid command parameters',
              details: `Invalid erase setting driver_internal_info.${key}=${JSON.stringify(value)}: expected ${want}${want === 'true or false' ? ' (1/0, true/false, yes/no, on/off, t/f, y/n)' : ''}`,
            });
          }
        }
        // The settings are the node's: as a step arg they would be a knob silently ignored.
        for (const step of ['erase_devices', 'erase_devices_express']) {
          const r = await execute(c, {}, step, { iterations: 'abc', agent_erase_devices_zeroize: false });
          expect(r.command_error).toEqual({
            type: 'InvalidCommandParamsError',
            code: 400,
            message: 'Invalid command parameters',
            details:
              "The erase steps take no args (their settings come from the node's driver_internal_info): got iterations, agent_erase_devices_zeroize",
          });
        }
      });
      expect(await digest(d!)).toBe(before);
    });
  });

  it('values as text are read as what they spell, and used', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      await withAgentOn([d!], { 'ipa-erase-discard': 'false' }, async (c) => {
        const r = await execute(
          c,
          {
            agent_erase_devices_iterations: '2',
            agent_erase_devices_zeroize: 'False',
            disk_erasure_concurrency: '4',
            agent_enable_ata_secure_erase: 'no',
          },
          'erase_devices',
          // Empty args, as a conductor may send them, are no args.
          {},
        );
        expect(r.command_error).toBeNull();
        const disk = (r.command_result as { clean_result: Record<string, any> }).clean_result[d!.path];
        // Two random passes and no zero pass; ATA off, so no ATA attempt before the overwrite.
        expect(disk).toMatchObject({ method: 'overwrite', passes: 2, verification: { ok: true, expect: 'changed' } });
        expect(disk.attempts).toEqual([]);
      });
    });
  });

  it('a concurrency above the bound (a 90-disk storage node) is run at the bound, with a log line; 100 passes are taken', () => {
    const lines: string[] = [];
    const log = pino({}, { write: (l: string) => lines.push(l) });
    const warned = () =>
      lines.map((l) => JSON.parse(l)).map(({ level, asked, used, msg }) => ({ level, asked, used, msg }));
    const cfg = { randomPasses: 1, finalZeroPass: true, discardFirst: false };
    const s = eraseSettingsFrom(
      { disk_erasure_concurrency: 90, agent_erase_devices_iterations: MAX_ERASE_ITERATIONS },
      cfg,
      log,
    );
    expect(s.concurrency).toBe(MAX_ERASE_CONCURRENCY);
    expect(s.randomPasses).toBe(100);
    expect(warned()).toEqual([{ level: 40, asked: 90, used: 64, msg: 'disk_erasure_concurrency 90 is run as 64' }]);
    expect(eraseSettingsFrom({ disk_erasure_concurrency: '4' }, cfg, log).concurrency).toBe(4);
    expect(lines).toHaveLength(1);
  });
});
