// IPA's guard of shared filesystems through the real API, on loop devices: the metadata and express erases
// refuse a disk with a VMFS or GPFS partition (ProtectedDeviceError) unless the node or the agent turns it off.
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import type { AgentClient } from '../helpers/agent-client.ts';
import { runCleanStep } from '../helpers/clean-step.ts';
import { withAgentOn } from '../helpers/agent-on-disks.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';

const VMFS_GPT = 'AA31E02A-400F-11DB-9590-000C2911D1B8';
const GPFS_GPT = '37AFFC90-EF7D-4E96-91C3-2D7AE055B174';

const withAgent = withAgentOn;

const execute = (c: AgentClient, name: string, driverInternalInfo: Record<string, unknown> = {}) =>
  runCleanStep(c, name, {}, {}, driverInternalInfo);

/** The partition table type and the first partition's type, as blkid reads them from the disk. */
async function table(dev: LoopDevice): Promise<string> {
  const pt = await execa('blkid', ['-p', '-o', 'value', '-s', 'PTTYPE', dev.path], { reject: false });
  const part = await execa('blkid', ['-p', '-o', 'value', '-s', 'PART_ENTRY_TYPE', `${dev.path}p1`], {
    reject: false,
  });
  return `${pt.stdout.trim()} ${part.stdout.trim()}`.trim();
}

const SHARED = [
  { what: 'VMware VMFS Partition (MBR)', table: 'dos 0xfb', label: 'label: dos\nstart=2048, size=16384, type=fb\n' },
  {
    what: 'VMware VMFS Partition (GPT)',
    table: `gpt ${VMFS_GPT.toLowerCase()}`,
    label: `label: gpt\nsize=8M, type=${VMFS_GPT}\n`,
  },
  {
    what: 'IBM GPFS Partition',
    table: `gpt ${GPFS_GPT.toLowerCase()}`,
    label: `label: gpt\nsize=8M, type=${GPFS_GPT}\n`,
  },
];

/** A disk with one partition of the shared filesystem's type, and a plain GPT disk beside it. */
async function withSharedDisk(label: string, body: (shared: LoopDevice, plain: LoopDevice) => Promise<void>) {
  await withLoops([32 * MiB, 32 * MiB], async ([shared, plain]) => {
    await execa('sfdisk', ['-q', shared!.path], { input: label });
    await execa('sfdisk', ['-q', plain!.path], { input: 'label: gpt\nsize=8M\n' });
    for (const d of [shared!, plain!]) await execa('partx', ['-u', d.path], { reject: false });
    await body(shared!, plain!);
  });
}

describe('shared filesystems (guard_special_filesystems)', () => {
  for (const fs of SHARED) {
    it(`erase_devices_metadata refuses a disk with a "${fs.what}" and touches no disk`, async () => {
      await withSharedDisk(fs.label, async (shared, plain) => {
        expect(await table(shared)).toBe(fs.table);
        await withAgent([plain, shared], {}, async (c) => {
          const r = await execute(c, 'erase_devices_metadata');
          expect(r.command_status).toBe('FAILED');
          const err = r.command_error as { type: string; message: string; details: string };
          expect(err.type).toBe('ProtectedDeviceError');
          // As IPA's: the message is the details, not a class summary.
          expect(err.message).toBe(err.details);
          expect(err.details).toMatch(
            new RegExp(`^Protected ${fs.what.replace(/[()]/g, '\\$&')} located on device ${shared.path}p1\\. `),
          );
          expect(err.details).toContain('No disk was erased.');
        });
        expect(await table(shared)).toBe(fs.table);
        expect(await table(plain)).toMatch(/^gpt /);
      });
    });
  }

  it('erase_devices_express refuses a disk with a VMFS partition too', async () => {
    await withSharedDisk(SHARED[0]!.label, async (shared, plain) => {
      await withAgent([plain, shared], {}, async (c) => {
        const r = await execute(c, 'erase_devices_express');
        expect(r.command_status).toBe('FAILED');
        expect((r.command_error as { type: string }).type).toBe('ProtectedDeviceError');
      });
      expect(await table(shared)).toBe(SHARED[0]!.table);
      expect(await table(plain)).toMatch(/^gpt /);
    });
  });

  it('erases it when the node sets driver_internal_info.wipe_special_filesystems to false', async () => {
    await withSharedDisk(SHARED[1]!.label, async (shared, plain) => {
      await withAgent([plain, shared], {}, async (c) => {
        const r = await execute(c, 'erase_devices_metadata', { wipe_special_filesystems: false });
        expect(r.command_error).toBeNull();
        expect(r.command_status).toBe('SUCCEEDED');
      });
      expect(await table(shared)).toBe('');
      expect(await table(plain)).toBe('');
    });
  });

  it('erases it when the agent runs with ipa-guard-special-filesystems=false, whatever the node says', async () => {
    await withSharedDisk(SHARED[0]!.label, async (shared) => {
      await withAgent([shared], { 'ipa-guard-special-filesystems': 'false' }, async (c) => {
        const r = await execute(c, 'erase_devices_metadata', { wipe_special_filesystems: true });
        expect(r.command_error).toBeNull();
        expect(r.command_status).toBe('SUCCEEDED');
      });
      expect(await table(shared)).toBe('');
    });
  });
});
