// The commands newer Ironic sends beyond deploy and cleaning, through the agent's API: system.lockdown,
// rescue.finalize_rescue (on a fake root, never the host's /etc) and the service.* pair, with their argument
// validation (IPA's error types, nothing written).
import { mkdtemp, readFile, rm, stat, writeFile, mkdir } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { CRYPT_HASH, setRescuePassword } from '../../agent/host/rescue-user.ts';
import type { QuiesceReason } from '../../agent/host/host-actions.ts';
import { call, startAgent, type RunningAgent } from '../helpers/api-harness.ts';

// `openssl passwd -5 -salt inasalt123 hunter2`, what Ironic's hash_password makes with its sha256 default
const HASH = '$5$inasalt123$DvHspZ7u.IUeaVJ5mSAlLUVxCSdl2zXVNHGvpuAAST1';

const cleanups: (() => Promise<unknown>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

async function agentWith(flags: Record<string, string> = {}): Promise<{ a: RunningAgent; quiesced: QuiesceReason[] }> {
  const a = await startAgent(flags);
  cleanups.push(() => a.close());
  const quiesced: QuiesceReason[] = [];
  a.agent.services.host.on('quiesce', (r) => quiesced.push(r));
  return { a, quiesced };
}

const post = (a: RunningAgent, name: string, params: Record<string, unknown>) =>
  call(`${a.url}/v1/commands/?wait=true`, { method: 'POST', body: JSON.stringify({ name, params }) });

async function fakeRoot(): Promise<string> {
  const root = await mkdtemp(join(tmpdir(), 'ina-rescue-root-'));
  cleanups.push(() => rm(root, { recursive: true, force: true }));
  await mkdir(join(root, 'etc'));
  await writeFile(join(root, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\nina:x:1000:1000::/home/ina:/bin/sh\n');
  await writeFile(join(root, 'etc', 'group'), 'root:x:0:\nina:x:1000:\n');
  await writeFile(join(root, 'etc', 'shadow'), 'root:*:20000:0:99999:7:::\n');
  return root;
}

describe('system.lockdown', () => {
  it('answers SUCCEEDED with a null result, then goes quiet (after the reply)', async () => {
    const { a, quiesced } = await agentWith();
    const r = await post(a, 'system.lockdown', {});
    expect(r.status).toBe(200);
    expect(r.json).toMatchObject({
      command_name: 'lockdown',
      command_status: 'SUCCEEDED',
      command_result: null,
      command_error: null,
    });
    expect(quiesced).toEqual([]);
    await expect.poll(() => quiesced).toEqual(['lockdown']);
  });
});

describe('rescue.finalize_rescue', () => {
  it('the test hash is what Ironic sends', () => expect(HASH).toMatch(CRYPT_HASH));

  it.each([
    ['no password', {}, /'rescue_password' is required/],
    ['plain text', { rescue_password: 'hunter2' }, /Only a hashed rescue password/],
    ['hashed false', { rescue_password: HASH, hashed: false }, /Only a hashed rescue password/],
    ['not a crypt hash', { rescue_password: 'hunter2', hashed: true }, /must be a SHA-256 or SHA-512 crypt hash/],
    ['md5 crypt', { rescue_password: '$1$salt$qJH7.N4xYta3aEG/dfqo/0', hashed: true }, /crypt hash/],
  ])('refuses %s with HTTP 400 InvalidCommandParamsError, writing nothing', async (_n, params, why) => {
    const root = await fakeRoot();
    const { a, quiesced } = await agentWith({ 'ina-rescue-root': root });
    const r = await post(a, 'rescue.finalize_rescue', params);
    expect(r.status).toBe(400);
    expect(r.json.faultstring).toMatch(why);
    await expect(stat(join(root, 'etc', 'ipa-rescue-config'))).rejects.toThrow();
    expect(await readFile(join(root, 'etc', 'shadow'), 'utf8')).toBe('root:*:20000:0:99999:7:::\n');
    expect(quiesced).toEqual([]);
  });

  it('fails without a rescue root outside a ramdisk, and stays up', async () => {
    const { a, quiesced } = await agentWith();
    const r = await post(a, 'rescue.finalize_rescue', { rescue_password: HASH, hashed: true });
    expect(r.json).toMatchObject({ command_status: 'FAILED', command_error: { type: 'CommandExecutionError' } });
    expect(r.json.command_error.details).toMatch(/--ina-rescue-root/);
    await new Promise((res) => setTimeout(res, 700));
    expect(quiesced).toEqual([]);
  });

  it("sets the hash for a new rescue user, writes IPA's password file and marker, then goes quiet", async () => {
    const root = await fakeRoot();
    const { a, quiesced } = await agentWith({ 'ina-rescue-root': root });
    const r = await post(a, 'rescue.finalize_rescue', { rescue_password: HASH, hashed: true });
    expect(r.json).toMatchObject({ command_status: 'SUCCEEDED', command_result: null });
    expect(await readFile(join(root, 'etc', 'ipa-rescue-config', 'ipa-rescue-password'), 'utf8')).toBe(HASH);
    expect((await stat(join(root, 'etc', 'ipa-rescue-config', 'ipa-rescue-password'))).mode & 0o777).toBe(0o600);
    await stat(join(root, 'etc', '.rescued'));
    // A second name for uid 0 (the DIB ramdisk's rescue user has passwordless sudo); root's own entries stay.
    expect(await readFile(join(root, 'etc', 'passwd'), 'utf8')).toBe(
      'root:x:0:0:root:/root:/bin/sh\nina:x:1000:1000::/home/ina:/bin/sh\nrescue:x:0:0:rescue:/home/rescue:/bin/sh\n',
    );
    expect(await readFile(join(root, 'etc', 'group'), 'utf8')).toBe('root:x:0:\nina:x:1000:\n');
    expect((await stat(join(root, 'home', 'rescue'))).mode & 0o777).toBe(0o700);
    const shadow = (await readFile(join(root, 'etc', 'shadow'), 'utf8')).split('\n');
    expect(shadow[0]).toBe('root:*:20000:0:99999:7:::');
    expect(shadow[1]).toMatch(new RegExp(`^rescue:${HASH.replace(/[$.]/g, '\\$&')}:\\d+:0:99999:7:::$`));
    await expect.poll(() => quiesced).toEqual(['rescue']);
  });

  it('replaces the password of an existing rescue user without adding a second one', async () => {
    const root = await fakeRoot();
    await setRescuePassword(root, HASH);
    const other = `$6$othersalt$${'a'.repeat(86)}`;
    await setRescuePassword(root, other);
    const shadow = await readFile(join(root, 'etc', 'shadow'), 'utf8');
    expect(shadow.match(/^rescue:/gm)).toHaveLength(1);
    expect(shadow).toContain(`rescue:${other}:`);
    expect((await readFile(join(root, 'etc', 'passwd'), 'utf8')).match(/^rescue:/gm)).toHaveLength(1);
  });
});

describe('service.get_service_steps / execute_service_step', () => {
  it('lists the burn-ins but burnin_disk, write_image, inject_files and the RAID steps (priority 0) under GenericHardwareManager with the version', async () => {
    const { a } = await agentWith();
    const r = await post(a, 'service.get_service_steps', { node: {}, ports: [] });
    const steps = ['burnin_cpu', 'burnin_memory', 'burnin_network', 'write_image', 'inject_files'];
    const raid = ['delete_configuration', 'create_configuration', 'apply_configuration'];
    const listed = (r.json.command_result as { service_steps: { GenericHardwareManager: { step: string }[] } })
      .service_steps.GenericHardwareManager;
    // IPA's service steps: the RAID ones on interface raid, the rest on deploy (shared/reference: hardware-managers)
    expect([...listed.map((x) => x.step)].sort()).toEqual([...steps, ...raid].sort());
    expect(r.json.command_result).toEqual({
      service_steps: {
        GenericHardwareManager: listed.map(({ step }) =>
          expect.objectContaining({ step, priority: 0, interface: raid.includes(step) ? 'raid' : 'deploy' }),
        ),
      },
      hardware_manager_version: { generic_hardware_manager: '1.2' },
    });
  });

  it('an unknown step is HardwareManagerMethodNotFound, a version mismatch CLEAN_VERSION_MISMATCH, bad files InvalidCommandParamsError', async () => {
    const { a } = await agentWith();
    const run = (step: Record<string, unknown>, version: unknown = { generic_hardware_manager: '1.2' }) =>
      post(a, 'service.execute_service_step', { step, node: {}, ports: [], service_version: version });
    expect((await run({ interface: 'deploy', step: 'erase_devices', args: {} })).json.command_error.type).toBe(
      'HardwareManagerMethodNotFound',
    );
    expect(
      (await run({ interface: 'deploy', step: 'inject_files', args: {} }, { generic_hardware_manager: '0.9' })).json
        .command_status,
    ).toBe('CLEAN_VERSION_MISMATCH');
    const bad = await run({
      interface: 'deploy',
      step: 'inject_files',
      args: { files: [{ path: 'x', content: 'eA==' }] },
    });
    expect(bad.json).toMatchObject({ command_status: 'FAILED', command_error: { type: 'InvalidCommandParamsError' } });
    expect(bad.json.command_error.details).toMatch(/^Validation of files failed/);
    // no files at all: nothing to do, nothing touched
    const none = await run({ interface: 'deploy', step: 'inject_files', args: { files: [] } });
    expect(none.json).toMatchObject({
      command_status: 'SUCCEEDED',
      command_result: { service_result: null, service_step: { step: 'inject_files' } },
    });
  });
});
