// erase_pstore and clean_uefi_nvram through the agent's API, only ever on a fake firmware root the test makes
// (--ina-firmware-root; the real efibootmgr works on its efivars folder), and the burn-in steps' settings:
// bad input fails with IPA's error type and runs nothing. The burn-ins themselves: test/burnin/steps.device.test.ts.
import { afterEach, describe, expect, it } from 'vitest';
import { hardwareManagerVersions } from '../helpers/builtin-steps.ts';
import { parseBootEntries, parseMatchPatterns } from '../../agent/host/uefi-nvram.ts';
import { pstoreMountPoint } from '../../agent/host/pstore.ts';
import { fioDiskArgs, fioNetworkArgs, networkPlan } from '../../agent/burnin/fio.ts';
import { stressArgs } from '../../agent/burnin/stress-ng.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { runCleanStep } from '../helpers/clean-step.ts';
import { startAgent, type RunningAgent } from '../helpers/api-harness.ts';
import { fakeFirmware, type FakeFirmware } from '../helpers/fake-firmware.ts';
import { installFakes } from '../helpers/fake-tools.ts';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function agent(flags: Record<string, string> = {}): Promise<AgentClient> {
  const a: RunningAgent = await startAgent({ 'device-allowlist': '/dev/null', ...flags });
  const c = new AgentClient({ url: a.url, pollIntervalMs: 50, pollAttempts: 600 });
  cleanups.push(
    () => a.close(),
    () => c.close(),
  );
  return c;
}

async function firmware(opts: Parameters<typeof fakeFirmware>[0]): Promise<FakeFirmware> {
  const f = await fakeFirmware(opts);
  cleanups.push(() => f.close());
  return f;
}

const ENTRIES = [
  { num: '0001', label: 'debian', loader: '\\EFI\\debian\\shimx64.efi' },
  { num: '0002', label: 'UEFI PXEv4' },
  { num: '0003', label: 'old grub', loader: '\\EFI\\old\\grubx64.efi' },
];

describe('clean_uefi_nvram (fake efivars)', () => {
  it('removes the entries matching the default patterns (disk, shim, grub) and keeps network boot', async () => {
    const fw = await firmware({ entries: ENTRIES });
    const c = await agent({ 'ina-firmware-root': fw.root });
    const r = await runCleanStep(c, 'clean_uefi_nvram');
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ clean_result: null, clean_step: { step: 'clean_uefi_nvram' } });
    expect(await fw.bootEntries()).toEqual(['0002']);
  });

  it('as a deploy step, with match_patterns: only the entries they match', async () => {
    const fw = await firmware({ entries: ENTRIES });
    const c = await agent({ 'ina-firmware-root': fw.root });
    const step = { interface: 'deploy', step: 'clean_uefi_nvram', args: { match_patterns: ['OLD\\\\GRUB'] } };
    const r = await c.command(
      'deploy.execute_deploy_step',
      { step, node: {}, ports: [], deploy_version: hardwareManagerVersions() },
      { poll: true },
    );
    expect(r.command_error).toBeNull();
    expect(await fw.bootEntries()).toEqual(['0001', '0002']);
  });

  it.each([
    ['not a list', 'shim'],
    ['a non-string item', ['shim', 3]],
    ['an invalid regular expression', ['HD(']],
  ])('match_patterns %s -> InvalidCommandParamsError, nothing removed', async (_what, patterns) => {
    const fw = await firmware({ entries: ENTRIES });
    const c = await agent({ 'ina-firmware-root': fw.root });
    const r = await runCleanStep(c, 'clean_uefi_nvram', { match_patterns: patterns });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'InvalidCommandParamsError' });
    expect(r.command_error).toMatchObject({
      details: expect.stringMatching(/^The match_patterns must be a list of strings/),
    });
    expect(await fw.bootEntries()).toEqual(['0001', '0002', '0003']);
  });

  it('outside the ramdisk and without a firmware root it refuses (CleaningError) and runs no efibootmgr', async () => {
    const fakes = await installFakes({ efibootmgr: 'process.exit(0);' });
    cleanups.push(() => fakes.close());
    const c = await agent();
    const r = await runCleanStep(c, 'clean_uefi_nvram');
    expect(r.command_error).toMatchObject({
      type: 'CleaningError',
      details: expect.stringMatching(/--ina-firmware-root/),
    });
    expect(await fakes.calls('efibootmgr')).toEqual([]);
  });

  it('parses efibootmgr -v lines into number, label and device path', () => {
    const text = [
      'BootCurrent: 0001',
      'BootOrder: 0001,0002',
      'Boot0001* debian\tHD(1,GPT,67452301-ab89-efcd-0123-456789abcdef,0x800,0x10000)/File(\\EFI\\debian\\shimx64.efi)',
      'Boot0002* UEFI PXEv4 (MAC:525400123456) PciRoot(0x0)/Pci(0x3,0x0)/MAC(525400123456,1)',
      'Boot000A  Disabled thing VenHw(99e275e7-75a0-4b37-a2e6-c5385e6c00cb)',
    ].join('\n');
    expect(parseBootEntries(text)).toEqual([
      {
        num: '0001',
        label: 'debian',
        path: 'HD(1,GPT,67452301-ab89-efcd-0123-456789abcdef,0x800,0x10000)/File(\\EFI\\debian\\shimx64.efi)',
      },
      { num: '0002', label: 'UEFI PXEv4 (MAC:525400123456)', path: 'PciRoot(0x0)/Pci(0x3,0x0)/MAC(525400123456,1)' },
      { num: '000A', label: 'Disabled thing', path: 'VenHw(99e275e7-75a0-4b37-a2e6-c5385e6c00cb)' },
    ]);
    expect(parseMatchPatterns(undefined).map((p) => p.source)).toEqual(['^HD\\(', 'shim.*\\.efi', 'grub.*\\.efi']);
  });
});

describe('erase_pstore (fake pstore)', () => {
  it('deletes every record in the mounted pstore', async () => {
    const fw = await firmware({ entries: [], pstore: ['dmesg-efi-1', 'console-ramoops-0'] });
    const c = await agent({ 'ina-firmware-root': fw.root });
    const r = await runCleanStep(c, 'erase_pstore');
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ clean_result: null });
    expect(await fw.pstoreEntries()).toEqual([]);
  });

  it('no pstore mounted: nothing to erase, the folder is left alone', async () => {
    const fw = await firmware({ entries: [], pstore: ['dmesg-efi-1'], pstoreMounted: false });
    const c = await agent({ 'ina-firmware-root': fw.root });
    expect((await runCleanStep(c, 'erase_pstore')).command_error).toBeNull();
    expect(await fw.pstoreEntries()).toEqual(['dmesg-efi-1']);
  });

  it('outside the ramdisk and without a firmware root it refuses (CleaningError)', async () => {
    const c = await agent();
    expect((await runCleanStep(c, 'erase_pstore')).command_error).toMatchObject({ type: 'CleaningError' });
  });

  it('finds the mount point by file system type, with /proc/mounts escapes undone', () => {
    expect(pstoreMountPoint('none /sys/fs/pstore pstore rw 0 0\n')).toBe('/sys/fs/pstore');
    expect(pstoreMountPoint('pstore /mnt/my\\040store pstore rw 0 0\n')).toBe('/mnt/my store');
    expect(pstoreMountPoint('tmpfs /pstore tmpfs rw 0 0\n')).toBeUndefined();
  });
});

describe('burn-in settings (driver_info), checked before any tool runs', () => {
  it("IPA's command lines and defaults", () => {
    expect(stressArgs('cpu', {}).args).toEqual(['--cpu', '0', '--timeout', '86400', '--metrics-brief']);
    expect(
      stressArgs('memory', {
        'agent_burnin_vm_vm-bytes': '512M',
        agent_burnin_vm_timeout: '60',
        agent_burnin_vm_outputfile: '/var/log/vm.log',
      }).args,
    ).toEqual([
      '--vm',
      '0',
      '--timeout',
      '60',
      '--vm-bytes',
      '512M',
      '--metrics-brief',
      '--log-file',
      '/var/log/vm.log',
    ]);
    expect(fioDiskArgs({}, ['/dev/sda'])).toEqual([
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
      '4',
      '--verify_state_save',
      '0',
      '--name',
      '/dev/sda',
      '--filename',
      '/dev/sda',
    ]);
    const plan = networkPlan({
      agent_burnin_fio_network_config: '{"role": "reader", "partner": "node-2"}',
      agent_burnin_fio_network_runtime: 30,
    });
    expect(plan).toEqual({ role: 'reader', partner: 'node-2', runtimeS: 30 });
    expect(fioNetworkArgs(plan, false)).toEqual([
      '--ioengine',
      'net',
      '--port',
      '9000',
      '--fill_device',
      '1',
      '--group_reporting',
      '--gtod_reduce',
      '1',
      '--numjobs',
      '16',
      '--name',
      'reader',
      '--rw',
      'read',
      '--hostname',
      'node-2',
    ]);
  });

  it.each([
    ['burnin_cpu', { agent_burnin_cpu_cpu: -1 }, /agent_burnin_cpu_cpu/],
    ['burnin_cpu', { agent_burnin_cpu_timeout: 'soon' }, /agent_burnin_cpu_timeout/],
    ['burnin_memory', { 'agent_burnin_vm_vm-bytes': '98 percent' }, /vm-bytes/],
    ['burnin_memory', { agent_burnin_vm_outputfile: 'relative.log' }, /absolute file path/],
    ['burnin_disk', { agent_burnin_fio_disk_loops: 0 }, /agent_burnin_fio_disk_loops/],
    ['burnin_disk', { agent_burnin_fio_disk_smart_test: true }, /smartctl/],
    ['burnin_network', {}, /needs a partner/],
    ['burnin_network', { agent_burnin_fio_network_pairing_backend_url: 'etcd3+http://x:2379' }, /dynamic pairing/],
    [
      'burnin_network',
      { agent_burnin_fio_network_config: { role: 'talker', partner: 'x' } },
      /role must be writer or reader/,
    ],
    [
      'burnin_network',
      { agent_burnin_fio_network_config: { role: 'writer', partner: 'x; rm -rf /' } },
      /partner must be a host/,
    ],
  ])('%s with %j -> CleaningError, no tool run', async (name, info, why) => {
    const fakes = await installFakes({ 'stress-ng': 'process.exit(0);', fio: 'process.exit(0);' });
    cleanups.push(() => fakes.close());
    const c = await agent();
    const r = await runCleanStep(c, name, {}, info);
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'CleaningError', details: expect.stringMatching(why) });
    expect([...(await fakes.calls('stress-ng')), ...(await fakes.calls('fio'))]).toEqual([]);
  });

  it('a failing tool is CommandExecutionError naming it', async () => {
    const fakes = await installFakes({
      'stress-ng': 'process.stderr.write("stress-ng: out of cheese\\n"); process.exit(2);',
    });
    cleanups.push(() => fakes.close());
    const c = await agent();
    const r = await runCleanStep(c, 'burnin_cpu', {}, { agent_burnin_cpu_timeout: 1 });
    expect(r.command_error).toMatchObject({
      type: 'CommandExecutionError',
      details: expect.stringMatching(/^stress-ng \(cpu\) failed with error .*out of cheese/),
    });
  });
});
