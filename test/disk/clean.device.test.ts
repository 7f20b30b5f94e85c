// Cleaning through the real API on loopback, against loop devices: the step list, metadata erase, full
// erase (discard and overwrite), the version check, and the device guard refusing a mounted disk.
import { chmod, mkdtemp, open, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { builtinStep, hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import type { AgentClient, CommandResult } from '../helpers/agent-client.ts';
import { withAgentOn } from '../helpers/agent-on-disks.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

const withAgent = withAgentOn;

function step(name: string): Record<string, unknown> {
  const s = builtinStep('clean', name);
  return { ...s, requires_ramdisk: true };
}

const node = (driverInternalInfo: Record<string, unknown> = {}) => ({
  uuid: '2005a784-89ea-4482-b56a-65497029a47e',
  properties: {},
  instance_info: {},
  driver_internal_info: driverInternalInfo,
});

function execute(c: AgentClient, name: string, extra: Record<string, unknown> = {}): Promise<CommandResult> {
  return c.command(
    'clean.execute_clean_step',
    { step: step(name), node: node(), ports: [], clean_version: hardwareManagerVersions(), ...extra },
    { poll: true },
  );
}

async function signatures(dev: string): Promise<string> {
  return (await execa('wipefs', ['-n', '--noheadings', dev])).stdout.trim();
}

async function fill(dev: LoopDevice, byte: number): Promise<void> {
  const fh = await open(dev.path, 'r+');
  try {
    await fh.write(Buffer.alloc(dev.sizeBytes, byte), 0, dev.sizeBytes, 0);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

/**
 * Runs `body` with shell scripts first on PATH, each standing in for the tool it is named after (and calling
 * the real one, found by `command -v` before PATH changes, as `$REAL`).
 */
async function withFakeTools<T>(tools: Record<string, string>, body: () => Promise<T>): Promise<T> {
  const bin = await mkdtemp(join(tmpdir(), 'ina-fake-'));
  const path = process.env.PATH;
  try {
    for (const [name, script] of Object.entries(tools)) {
      const real = (await execa('sh', ['-c', `command -v ${name}`])).stdout;
      await writeFile(join(bin, name), `#!/bin/sh\nREAL=${real}\n${script}\n`);
      await chmod(join(bin, name), 0o755);
    }
    process.env.PATH = `${bin}:${path}`;
    return await body();
  } finally {
    process.env.PATH = path;
    await rm(bin, { recursive: true, force: true });
  }
}

/** A reused disk: an ext4 filesystem and a FAT boot sector over it, which `blkid -p` cannot choose between. */
async function makeAmbivalent(dev: LoopDevice): Promise<void> {
  await execa('mkfs.ext4', ['-q', '-F', dev.path]);
  const fat = join(await mkdtemp(join(tmpdir(), 'ina-fat-')), 'fat.img');
  try {
    await execa('mkfs.vfat', ['-C', fat, '1440']);
    await execa('dd', [`if=${fat}`, `of=${dev.path}`, 'bs=512', 'count=1', 'conv=notrunc,fsync', 'status=none']);
  } finally {
    await rm(join(fat, '..'), { recursive: true, force: true });
  }
  expect((await execa('blkid', ['-p', dev.path], { reject: false })).exitCode).toBe(8);
}

describe('clean extension', () => {
  it('does not offer a burn-in step whose tool this machine lacks (the ramdisk has no fio)', async () => {
    const bin = await mkdtemp(join(tmpdir(), 'ina-nofio-'));
    const path = process.env.PATH;
    try {
      await symlink((await execa('sh', ['-c', 'command -v sh'])).stdout, join(bin, 'sh'));
      await symlink((await execa('sh', ['-c', 'command -v stress-ng'])).stdout, join(bin, 'stress-ng'));
      process.env.PATH = bin;
      await withAgent([], {}, async (c) => {
        for (const kind of ['clean', 'service']) {
          const r = await c.command(`${kind}.get_${kind}_steps`, { node: node(), ports: [] }, { wait: true });
          const steps = (r.command_result as Record<string, { GenericHardwareManager: { step: string }[] }>)[
            `${kind}_steps`
          ]!.GenericHardwareManager.map((s) => s.step);
          expect(steps).toContain('burnin_cpu');
          expect(steps.filter((s) => s === 'burnin_disk' || s === 'burnin_network')).toEqual([]);
        }
      });
    } finally {
      process.env.PATH = path;
      await rm(bin, { recursive: true, force: true });
    }
  });

  it('lists erase_devices_metadata (99), erase_devices (10) and the manual steps (0) under the generic hardware manager', async () => {
    await withAgent([], {}, async (c) => {
      const r = await c.command('clean.get_clean_steps', { node: node(), ports: [] }, { wait: true });
      expect(r.command_status).toBe('SUCCEEDED');
      expect(r.command_result).toEqual({
        clean_steps: {
          GenericHardwareManager: [
            {
              step: 'erase_devices',
              priority: 10,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            },
            {
              step: 'erase_devices_metadata',
              priority: 99,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            },
            {
              step: 'erase_devices_express',
              priority: 0,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            },
            {
              step: 'erase_pstore',
              priority: 0,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            },
            {
              step: 'clean_uefi_nvram',
              priority: 0,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
              argsinfo: {
                match_patterns: { description: expect.stringMatching(/regular expressions/), required: false },
              },
            },
            ...['burnin_cpu', 'burnin_disk', 'burnin_memory', 'burnin_network'].map((name) => ({
              step: name,
              priority: 0,
              interface: 'deploy',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            })),
            ...['delete_configuration', 'create_configuration'].map((name) => ({
              step: name,
              priority: 0,
              interface: 'raid',
              reboot_requested: false,
              abortable: true,
              requires_ramdisk: true,
            })),
          ],
        },
        hardware_manager_version: { generic_hardware_manager: '1.2' },
      });
    });
  });

  it('erase_devices_metadata leaves no signature on any disk or partition', async () => {
    await withLoops([48 * MiB, 48 * MiB], async ([gpt, mbr]) => {
      await execa('sgdisk', ['-n', '1:0:+16M', '-t', '1:ef00', '-n', '2:0:+16M', gpt!.path]);
      await execa('partx', ['-u', gpt!.path]);
      await execa('mkfs.vfat', [`${gpt!.path}p1`]);
      await execa('mkfs.ext4', ['-q', `${gpt!.path}p2`]);
      await execa('parted', ['-s', mbr!.path, 'mklabel', 'msdos', 'mkpart', 'primary', 'ext4', '1MiB', '40MiB']);
      await execa('partx', ['-u', mbr!.path]);
      await execa('mkfs.ext4', ['-q', `${mbr!.path}p1`]);
      expect(await signatures(gpt!.path)).not.toBe('');

      await withAgent([gpt!, mbr!], {}, async (c) => {
        const r = await execute(c, 'erase_devices_metadata');
        expect(r.command_error).toBeNull();
        expect(r.command_status).toBe('SUCCEEDED');
        expect(r.command_result).toEqual({ clean_result: null, clean_step: step('erase_devices_metadata') });
      });
      for (const d of [gpt!, mbr!]) {
        expect(await signatures(d.path)).toBe('');
        const probe = await execa('blkid', ['-p', d.path], { reject: false });
        expect(probe.exitCode).toBe(2);
        const image = await readFile(d.file);
        expect(image.subarray(0, MiB).every((b) => b === 0)).toBe(true);
        expect(image.subarray(d.sizeBytes - MiB).every((b) => b === 0)).toBe(true);
      }
      // The old partitions' filesystems are gone too, not just the table that pointed at them.
      const part2 = (await readFile(gpt!.file)).subarray(17 * MiB, 18 * MiB);
      expect(part2.readUInt16LE(0x438)).not.toBe(0xef53);
    });
  });

  it('erase_devices discards when it can, and counts it once the read-back finds zeros', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!, 0xa5);
      await withAgent([d!], {}, async (c) => {
        const r = await execute(c, 'erase_devices');
        expect(r.command_status).toBe('SUCCEEDED');
        const disk = (r.command_result as { clean_result: Record<string, any> }).clean_result[d!.path];
        // A loop device offers no ATA security: hdparm -I shows no security section.
        expect(disk).toMatchObject({ bytes: d!.sizeBytes, verification: { ok: true, expect: 'zeros', failure: null } });
        expect(['secure discard', 'discard']).toContain(disk.method);
        expect(disk.attempts[0].method).toBe('ata security erase');
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('erase_devices overwrites with random passes, then zeros, when discard is off', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!, 0xa5);
      await withAgent([d!], { 'ipa-erase-discard': 'false', 'ipa-erase-random-passes': '1' }, async (c) => {
        const r = await execute(c, 'erase_devices');
        expect(r.command_status).toBe('SUCCEEDED');
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('erase_devices shows the disk, the pass and how far it got while it runs', async () => {
    await withLoops([128 * MiB], async ([d]) => {
      await withAgent([d!], { 'ipa-erase-discard': 'false', 'ipa-erase-random-passes': '1' }, async (c) => {
        const started = await c.command(
          'clean.execute_clean_step',
          { step: step('erase_devices'), node: node(), ports: [], clean_version: hardwareManagerVersions() },
          { wait: false },
        );
        expect(started.command_status).toBe('RUNNING');
        const seen: Record<string, unknown>[] = [];
        let last = started;
        while (last.command_status === 'RUNNING') {
          if (last.command_result) seen.push(last.command_result as Record<string, unknown>);
          await new Promise((r) => setTimeout(r, 50));
          last = (await c.lastCommand())!;
        }
        expect(last.command_status).toBe('SUCCEEDED');
        expect(seen.length).toBeGreaterThan(0);
        const overwrite = seen
          .map((r) => (r.disks as Record<string, Record<string, unknown>>)[d!.path]!)
          .filter((r) => r.phase === 'overwrite');
        expect(overwrite.length).toBeGreaterThan(0);
        for (const r of overwrite) {
          expect(r).toMatchObject({ phase: 'overwrite', device: d!.path, passes: 2, bytes_total: d!.sizeBytes });
          expect(r.bytes_done as number).toBeLessThanOrEqual(d!.sizeBytes);
        }
        seen.splice(0, seen.length, ...overwrite);
        // Reports move forward: by pass, then by bytes within a pass.
        const order = seen.map((r) => (r.pass as number) * d!.sizeBytes + (r.bytes_done as number));
        expect(order).toEqual([...order].sort((a, b) => a - b));
        expect(seen.some((r) => r.pass === 1 && r.data === 'random')).toBe(true);
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('erase_devices honours the node asking for no zero pass: random data remains', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!, 0xa5);
      await withAgent([d!], { 'ipa-erase-discard': 'false' }, async (c) => {
        const r = await execute(c, 'erase_devices', {
          node: node({ agent_erase_devices_iterations: 1, agent_erase_devices_zeroize: false }),
        });
        expect(r.command_status).toBe('SUCCEEDED');
      });
      const data = await readFile(d!.path);
      const same = data.reduce((n, b) => n + (b === 0xa5 ? 1 : 0), 0);
      const zeros = data.reduce((n, b) => n + (b === 0 ? 1 : 0), 0);
      expect(same).toBeLessThan(data.length / 100);
      expect(zeros).toBeLessThan(data.length / 100);
    });
  });

  it('erases a reused disk whose filesystem signatures blkid cannot choose between, in every erase step', async () => {
    await withLoops([16 * MiB, 16 * MiB], async ([a, b]) => {
      await makeAmbivalent(a!);
      await makeAmbivalent(b!);
      await withAgent([a!, b!], { 'ipa-erase-discard': 'false' }, async (c) => {
        const meta = await execute(c, 'erase_devices_metadata');
        expect(meta.command_error).toBeNull();
        expect(await signatures(a!.path)).toBe('');
        const full = await execute(c, 'erase_devices');
        expect(full.command_error).toBeNull();
        const result = (full.command_result as { clean_result: Record<string, { method?: string }> }).clean_result;
        expect(result[b!.path]?.method).toBe('overwrite');
      });
      expect((await readFile(b!.file)).every((x) => x === 0)).toBe(true);
    });
  });

  it('still leaves a software-RAID member alone, and fails rather than skips a disk blkid cannot probe', async () => {
    await withLoops([8 * MiB, 8 * MiB], async ([member, broken]) => {
      await fill(member!, 0xa5);
      await fill(broken!, 0xa5);
      // No md driver here: blkid is told what it would find on a member.
      const raid = `case "$*" in *"-u raid"*${member!.path}*) echo TYPE=linux_raid_member; exit 0;; esac`;
      const fails = `case "$*" in *"-u raid"*${broken!.path}*) echo "blkid: I/O error" >&2; exit 4;; esac`;
      await withFakeTools({ blkid: `${raid}\nexec "$REAL" "$@"` }, () =>
        withAgent([member!], {}, async (c) => {
          const r = await execute(c, 'erase_devices');
          expect(r.command_error).toBeNull();
          const result = (r.command_result as { clean_result: Record<string, unknown> }).clean_result;
          expect(result[member!.path]).toEqual({ skipped: 'member of a software RAID' });
        }),
      );
      await withFakeTools({ blkid: `${fails}\nexec "$REAL" "$@"` }, () =>
        withAgent([broken!], {}, async (c) => {
          for (const name of ['erase_devices', 'erase_devices_metadata']) {
            const r = await execute(c, name);
            expect(r.command_status).toBe('FAILED');
            const err = r.command_error as { type: string; details: string };
            expect(err.type).toBe('BlockDeviceEraseError');
            expect(err.details).toContain(`cannot tell whether ${broken!.path} is a software-RAID member`);
          }
        }),
      );
      for (const d of [member!, broken!]) expect((await readFile(d.file)).every((x) => x === 0xa5)).toBe(true);
    });
  });

  it('erase_devices_metadata goes on past a disk whose wipe fails, then fails naming it as IPA does', async () => {
    await withLoops([16 * MiB, 16 * MiB], async ([bad, good]) => {
      for (const d of [bad!, good!]) await execa('sgdisk', ['-n', '1:0:+4M', d.path]);
      const wipefs = `case "$*" in *${bad!.path}*) echo "wipefs: probing initialization failed" >&2; exit 1;; esac`;
      await withFakeTools({ wipefs: `${wipefs}\nexec "$REAL" "$@"` }, () =>
        withAgent([bad!, good!], {}, async (c) => {
          const r = await execute(c, 'erase_devices_metadata');
          expect(r.command_status).toBe('FAILED');
          const err = r.command_error as { type: string; details: string };
          expect(err.type).toBe('BlockDeviceEraseError');
          expect(err.details).toMatch(
            new RegExp(
              `^Failed to erase the metadata on the device\\(s\\): "${bad!.path}": .*probing initialization failed`,
            ),
          );
          expect(err.details).not.toContain(good!.path);
        }),
      );
      expect(await signatures(good!.path)).toBe('');
      expect(await signatures(bad!.path)).toMatch(/gpt/);
    });
  });

  it('refuses to clean while a managed disk is mounted, and touches no disk', async () => {
    await withLoops([32 * MiB, 32 * MiB], async ([free, busy]) => {
      await execa('sgdisk', ['-n', '1:0:+8M', free!.path]);
      await execa('mkfs.ext4', ['-q', busy!.path]);
      const dir = await mkdtemp(join(tmpdir(), 'ina-mnt-'));
      await execa('mount', [busy!.path, dir]);
      try {
        await withAgent([free!, busy!], {}, async (c) => {
          const r = await execute(c, 'erase_devices_metadata');
          expect(r.command_status).toBe('FAILED');
          const err = r.command_error as { type: string; details: string };
          expect(err.type).toBe('CleaningError');
          expect(err.details).toContain(busy!.path);
          expect(err.details).toContain(`mounted at ${dir}`);
        });
        expect(await signatures(free!.path)).toMatch(/gpt/);
      } finally {
        await execa('umount', [dir]);
        await rm(dir, { recursive: true, force: true });
      }
    });
  });

  it('answers CLEAN_VERSION_MISMATCH when the conductor recorded other versions', async () => {
    await withAgent([], {}, async (c) => {
      const r = await execute(c, 'erase_devices_metadata', { clean_version: { generic_hardware_manager: '1.0' } });
      expect(r.command_status).toBe('CLEAN_VERSION_MISMATCH');
      expect((r.command_error as { type: string }).type).toBe('VersionMismatch');
    });
  });

  it("fails an unknown step with HardwareManagerMethodNotFound (IPA's dispatch), and rejects a step without a name as HTTP 400", async () => {
    await withAgent([], {}, async (c) => {
      const r = await c.command(
        'clean.execute_clean_step',
        { step: { step: 'burnin_gpu', interface: 'deploy' }, node: node(), ports: [] },
        { poll: true },
      );
      expect(r.command_status).toBe('FAILED');
      expect((r.command_error as { type: string }).type).toBe('HardwareManagerMethodNotFound');
      await expect(c.command('clean.execute_clean_step', { step: { interface: 'deploy' } })).rejects.toThrow(
        /400.*Malformed clean_step/,
      );
    });
  });
});
