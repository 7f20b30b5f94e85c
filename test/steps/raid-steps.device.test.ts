// The software RAID steps through the agent's API on this machine, whose kernel has no md: the step table as
// Ironic reads it, the refusals that come before any disk is touched (the loop devices stay byte for byte as
// they were), and the holders' layout really written on loop devices up to the point where mdadm would build
// the array. Arrays themselves are built in the ramdisk under QEMU (test/e2e/raid.test.ts).
import { createHash } from 'node:crypto';
import { open } from 'node:fs/promises';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient } from '../helpers/agent-client.ts';
import { withAgentOn } from '../helpers/agent-on-disks.ts';
import { startAgent } from '../helpers/api-harness.ts';
import { builtinStep, hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import { installFakes } from '../helpers/fake-tools.ts';
import { attachLoop, detachLoop, type LoopDevice } from '../helpers/loop.ts';

const MiB = 2 ** 20;
const GiB = 2 ** 30;
let a: LoopDevice;
let b: LoopDevice;

beforeAll(async () => {
  a = await attachLoop(2 * GiB);
  b = await attachLoop(2 * GiB);
});

afterAll(async () => {
  for (const d of [a, b]) if (d) await detachLoop(d);
});

const node = (target: unknown, extra: Record<string, unknown> = {}) => ({
  uuid: '1be26c0b-03f2-4d2d-ae87-c02d7f33ed92',
  properties: {},
  instance_info: { deploy_boot_mode: 'uefi' },
  driver_internal_info: {},
  target_raid_config: target,
  ...extra,
});

function clean(c: AgentClient, step: string, n: unknown) {
  return c.command(
    'clean.execute_clean_step',
    { step: { ...builtinStep('clean', step), args: {} }, node: n, ports: [], clean_version: hardwareManagerVersions() },
    { poll: true },
  );
}

function deploy(c: AgentClient, args: Record<string, unknown>, n: unknown) {
  return c.command(
    'deploy.execute_deploy_step',
    {
      step: { ...builtinStep('deploy', 'apply_configuration'), args },
      node: n,
      ports: [],
      deploy_version: hardwareManagerVersions(),
    },
    { poll: true },
  );
}

/**
 * What a write anywhere would change: the backing file's allocated blocks (the files are sparse, so any new
 * data allocates some) and the bytes of its first and last 4 MiB (the partition tables).
 */
async function digest(d: LoopDevice): Promise<string> {
  await execa('sync');
  const fh = await open(d.file, 'r');
  try {
    const hash = createHash('sha256');
    for (const at of [0, d.sizeBytes - 4 * MiB]) {
      const buf = Buffer.alloc(4 * MiB);
      await fh.read(buf, 0, buf.length, at);
      hash.update(buf);
    }
    return `${(await fh.stat()).blocks}:${hash.digest('hex')}`;
  } finally {
    await fh.close();
  }
}

const software = (d: Record<string, unknown>) => ({ controller: 'software', ...d });

describe('software RAID steps', () => {
  it('lists create/delete_configuration (clean, service) and apply_configuration (deploy, service) on interface raid at priority 0', async () => {
    await withAgentOn([], {}, async (c) => {
      const list = async (phase: string) => {
        const r = await c.command(`${phase}.get_${phase}_steps`, { node: {}, ports: [] }, { wait: true });
        const all = (r.command_result as Record<string, Record<string, { step: string }[]>>)[`${phase}_steps`]!
          .GenericHardwareManager!;
        return all.filter((s) => s.step.endsWith('_configuration'));
      };
      const flags = { interface: 'raid', priority: 0, reboot_requested: false, requires_ramdisk: true };
      expect(await list('clean')).toEqual([
        { step: 'delete_configuration', ...flags, abortable: true },
        { step: 'create_configuration', ...flags, abortable: true },
      ]);
      const deploySteps = await list('deploy');
      expect(deploySteps).toEqual([
        {
          step: 'apply_configuration',
          ...flags,
          abortable: false,
          argsinfo: {
            raid_config: { description: 'The RAID configuration to apply.', required: true },
            delete_existing: { description: expect.stringContaining('Default value is "True"'), required: false },
          },
        },
      ]);
      expect((await list('service')).map((s) => s.step)).toEqual([
        'delete_configuration',
        'create_configuration',
        'apply_configuration',
      ]);
    });
  });

  it('refuses an invalid config with SoftwareRAIDError before any disk is touched', async () => {
    const before = [await digest(a), await digest(b)];
    await withAgentOn([a, b], {}, async (c) => {
      const r = await clean(
        c,
        'create_configuration',
        node({
          logical_disks: [
            software({ size_gb: 'MAX', raid_level: '0' }),
            software({ size_gb: 'MAX', raid_level: '5' }),
            software({ size_gb: 1, raid_level: '2' }),
          ],
        }),
      );
      expect(r.command_status).toBe('FAILED');
      expect(r.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details:
          'Could not validate Software RAID config for 1be26c0b-03f2-4d2d-ae87-c02d7f33ed92: ' +
          'Software RAID configuration requires one or two logical disks; ' +
          'Software RAID Configuration requires RAID-1 for the first logical disk; ' +
          'Software RAID configuration is not possible for RAID level 5 with only 2 block devices found.',
      });
      // Mixed controllers, through the deploy step's raid_config argument.
      const mixed = await deploy(
        c,
        {
          raid_config: {
            logical_disks: [
              software({ size_gb: 1, raid_level: '1' }),
              { controller: 'hw', size_gb: 'MAX', raid_level: '0' },
            ],
          },
        },
        node(undefined),
      );
      expect(mixed.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details: expect.stringContaining("requires all logical disks to have 'controller'='software'"),
      });
      // A size no holder has room for.
      const big = await clean(
        c,
        'create_configuration',
        node({ logical_disks: [software({ size_gb: 3, raid_level: '1' })] }),
      );
      expect(big.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details: expect.stringMatching(/^Logical disk 0 \(RAID-1, 3 GiB\) does not fit on \/dev\/loop\d+/),
      });
      // A hint no allowed disk matches.
      const hint = await clean(
        c,
        'create_configuration',
        node({
          logical_disks: [
            software({ size_gb: 1, raid_level: '1', physical_disks: [{ name: a.path }, { name: '/dev/vda' }] }),
          ],
        }),
      );
      expect(hint.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details: expect.stringContaining('No candidates for physical disk {"name":"/dev/vda"}'),
      });
    });
    expect([await digest(a), await digest(b)]).toEqual(before);
  });

  it('a config for other controllers: create_configuration builds nothing and returns {}, apply_configuration refuses it', async () => {
    await withAgentOn([a, b], {}, async (c) => {
      const applied = await deploy(
        c,
        { raid_config: { logical_disks: [{ controller: 'hw', raid_level: '1', size_gb: 1 }] } },
        node(undefined),
      );
      expect(applied.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details: expect.stringContaining("requires all logical disks to have 'controller'='software'"),
      });
      const r = await clean(
        c,
        'create_configuration',
        node({ logical_disks: [{ controller: 'hw', raid_level: '1', size_gb: 1 }] }),
      );
      expect(r.command_error).toBeNull();
      expect(r.command_result).toMatchObject({ clean_result: {} });
    });
  });

  it('refuses holders that carry partitions, naming them, and leaves them as they were', async () => {
    await execa('sgdisk', ['-n', '1:0:+8M', b.path]);
    try {
      const before = [await digest(a), await digest(b)];
      await withAgentOn([a, b], {}, async (c) => {
        const r = await clean(
          c,
          'create_configuration',
          node({ logical_disks: [software({ size_gb: 1, raid_level: '1' })] }),
        );
        expect(r.command_error).toMatchObject({
          type: 'SoftwareRAIDError',
          details: `Partitions detected on devices ${b.path} during RAID config`,
        });
      });
      expect([await digest(a), await digest(b)]).toEqual(before);
    } finally {
      await execa('sgdisk', ['-Z', b.path]);
      await execa('partx', ['-u', b.path], { reject: false });
    }
  });

  it('writes the UEFI layout on both holders (RAID partition from 551 MiB to 1 GiB), then hands the members to mdadm', async () => {
    await withAgentOn([a, b], {}, async (c) => {
      const r = await clean(
        c,
        'create_configuration',
        node({
          logical_disks: [
            software({
              size_gb: 1,
              raid_level: '1',
              volume_name: 'root',
              physical_disks: [{ name: a.path }, { name: b.path }],
            }),
          ],
        }),
      );
      // This kernel has no md: the step fails at mdadm, naming the array and the members it was given.
      expect(r.command_error).toMatchObject({
        type: 'SoftwareRAIDError',
        details: expect.stringContaining(`Failed to create md device /dev/md0 on ${a.path}p1, ${b.path}p1: `),
      });
    });
    for (const d of [a, b]) {
      const { stdout } = await execa('sgdisk', ['-p', d.path]);
      const rows = stdout.split('\n').filter((l) => /^\s+\d+\s/.test(l));
      expect(rows).toHaveLength(1);
      const [num, start, end] = rows[0]!.trim().split(/\s+/);
      expect([num, Number(start) * 512, (Number(end) + 1) * 512]).toEqual(['1', 551 * MiB, GiB]);
      await execa('sgdisk', ['-Z', d.path]);
      await execa('partx', ['-u', d.path], { reject: false });
    }
  });

  it('remembers is_root_volume of the arrays it built until delete_configuration (mdadm stood in for)', async () => {
    // This kernel has no md: a stand-in mdadm "creates" every array and finds no superblock anywhere.
    const fakes = await installFakes({ mdadm: "process.exit(args[0] === '--create' ? 0 : 1);" });
    const running = await startAgent({ 'device-allowlist': `${a.path},${b.path}` });
    const c = new AgentClient({ url: running.url, pollIntervalMs: 100, pollAttempts: 1200 });
    const state = running.agent.services.state;
    try {
      // What an earlier build left: a failed or new build must not keep it.
      state.raidRootVolumes = new Map([['/dev/md9', true]]);
      const pair = [{ name: a.path }, { name: b.path }];
      const r = await deploy(
        c,
        {
          raid_config: {
            logical_disks: [
              software({ size_gb: 1, raid_level: '1', is_root_volume: true, physical_disks: pair }),
              software({ size_gb: 'MAX', raid_level: '0', is_root_volume: false, physical_disks: pair }),
            ],
          },
          delete_existing: false,
        },
        node(undefined),
      );
      expect(r.command_error).toBeNull();
      expect((await fakes.calls('mdadm')).filter((x) => x[0] === '--create').map((x) => x[1])).toEqual([
        '/dev/md0',
        '/dev/md1',
      ]);
      expect(state.raidRootVolumes).toEqual(
        new Map([
          ['/dev/md0', true],
          ['/dev/md1', false],
        ]),
      );
      const d = await clean(c, 'delete_configuration', node(undefined));
      expect(d.command_error).toBeNull();
      expect(state.raidRootVolumes.size).toBe(0);
    } finally {
      await c.close();
      await running.close();
      await fakes.close();
      for (const d of [a, b]) {
        await execa('sgdisk', ['-Z', d.path]);
        await execa('partx', ['-u', d.path], { reject: false });
      }
    }
  });
});
