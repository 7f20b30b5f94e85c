// The in-band deploy steps beyond write_image, on a real loop device through the agent's API:
// erase_devices_metadata (the cleaning step's code) and inject_files (by number, by /dev/disk/by-* name,
// by path), with argument validation that fails the command with IPA's error type and touches nothing.
import { mkdtemp, readFile, rmdir, symlink, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseInjectFiles } from '../../agent/disk/inject-files.ts';
import { InvalidCommandParamsError } from '../../agent/errors.ts';
import { attachLoop, detachLoop, MiB, type LoopDevice } from '../helpers/loop.ts';
import { readDevice, runToEnd, sha256, startImageAgent } from '../helpers/image-agent.ts';
import type { RunningAgent } from '../helpers/api-harness.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { makeDiskImage, workDir, type DiskImage } from '../helpers/make-image.ts';

const b64 = (s: string) => Buffer.from(s).toString('base64');

describe('inject_files argument validation (nothing touched)', () => {
  const bad: [string, unknown, RegExp][] = [
    ['not a list', { path: '/a' }, /files must be a list/],
    ['item not an object', ['x'], /files\[0\] must be an object/],
    ['unknown field', [{ path: '/a', content: b64('x'), colour: 'red' }], /unexpected fields colour/],
    ['no path', [{ content: b64('x') }], /files\[0\]\.path is required/],
    ['relative path', [{ path: 'etc/x', content: b64('x') }], /must be an absolute path/],
    ['dot-dot path', [{ path: '/etc/../../x', content: b64('x') }], /without '\.\.'/],
    ['the root itself', [{ path: '/', content: b64('x') }], /absolute path to a file/],
    ['partition zero', [{ path: '/a', partition: 0, content: b64('x') }], /partition must be a partition number/],
    ['partition not /dev', [{ path: '/a', partition: 'sda1', content: b64('x') }], /partition must be/],
    ['neither content nor deleted', [{ path: '/a' }], /either content or deleted/],
    ['content and deleted', [{ path: '/a', content: b64('x'), deleted: true }], /cannot both be set/],
    ['content not base64', [{ path: '/a', content: 'no*base64' }], /not valid base64/],
    ['content URL not http', [{ path: '/a', content: 'ftp://example.invalid/x' }], /only http\(s\) URLs/],
    ['deleted not boolean', [{ path: '/a', deleted: 'yes' }], /deleted must be a boolean/],
    ['mode too big', [{ path: '/a', content: b64('x'), mode: 0o17777 }], /mode must be an integer/],
    ['owner negative', [{ path: '/a', content: b64('x'), owner: -1 }], /owner must be an integer/],
    ['group a name', [{ path: '/a', content: b64('x'), group: 'wheel' }], /group must be an integer/],
  ];
  it.each(bad)('%s', (_name, files, why) => {
    let err: unknown;
    try {
      parseInjectFiles(files);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(InvalidCommandParamsError);
    expect((err as Error).message).toMatch(/^Validation of files failed: /);
    expect((err as Error).message).toMatch(why);
  });

  it('accepts every field', () => {
    expect(
      parseInjectFiles([
        {
          path: '/etc/x',
          partition: '/dev/disk/by-partlabel/root',
          content: b64('hi'),
          mode: 0o600,
          dirmode: 0o755,
          owner: 0,
          group: 0,
        },
      ]),
    ).toEqual([
      {
        path: '/etc/x',
        partition: '/dev/disk/by-partlabel/root',
        content: Buffer.from('hi'),
        deleted: false,
        mode: 0o600,
        dirmode: 0o755,
        owner: 0,
        group: 0,
      },
    ]);
  });
});

describe('deploy steps on a loop device', () => {
  let loop: LoopDevice;
  let server: ImageServer;
  let work: Awaited<ReturnType<typeof workDir>>;
  let gpt: DiskImage;
  let agent: RunningAgent;
  let version: unknown;
  const node = (properties: Record<string, unknown> = {}) => ({
    uuid: 'n1',
    properties,
    instance_info: { root_device: { name: loop.path } },
  });
  const deployStep = (step: string, args: Record<string, unknown>, properties?: Record<string, unknown>) =>
    runToEnd(agent.url, 'deploy.execute_deploy_step', {
      step: { interface: 'deploy', step, args, priority: 70 },
      node: node(properties),
      ports: [],
      deploy_version: version,
    });

  async function readFrom(part: string, path: string): Promise<{ text: string; mode: number } | null> {
    const dir = await mkdtemp(join(tmpdir(), 'ina-check-'));
    await execa('mount', ['-o', 'ro', part, dir]);
    try {
      const st = await stat(join(dir, path)).catch(() => null);
      return st ? { text: await readFile(join(dir, path), 'utf8'), mode: st.mode & 0o7777 } : null;
    } finally {
      await execa('umount', [dir]);
      await rmdir(dir);
    }
  }

  beforeAll(async () => {
    work = await workDir();
    gpt = await makeDiskImage(work.dir, { table: 'gpt' });
    server = await startImageServer();
    loop = await attachLoop(32 * MiB);
    agent = await startImageAgent(loop.path);
    version = (await runToEnd(agent.url, 'deploy.get_deploy_steps', { node: {}, ports: [] })).command_result
      .hardware_manager_version;
  });

  afterAll(async () => {
    await agent?.close();
    await detachLoop(loop);
    await server.close();
    await work.cleanup();
  });

  async function writeImage() {
    const url = await server.serveFile(`${Math.random()}.raw`, gpt.path);
    const r = await deployStep('write_image', {
      image_info: { id: 'gpt', urls: [url], disk_format: 'raw', checksum: sha256(await readFile(gpt.path)) },
      configdrive: null,
    });
    expect(r.command_error).toBeNull();
  }

  it('advertises erase_devices_metadata, clean_uefi_nvram, write_image, apply_configuration and inject_files at priority 0', async () => {
    const r = await runToEnd(agent.url, 'deploy.get_deploy_steps', { node: {}, ports: [] });
    const list = r.command_result.deploy_steps.GenericHardwareManager as { step: string; priority: number }[];
    expect(list.map((s) => [s.step, s.priority])).toEqual([
      ['erase_devices_metadata', 0],
      ['clean_uefi_nvram', 0],
      ['write_image', 0],
      ['apply_configuration', 0],
      ['inject_files', 0],
    ]);
    // Not required, as in IPA: the files may come from the node's inject_files property alone, and Ironic refuses
    // a deploy template or service step that lacks a required argument.
    const inject = list.find((s) => s.step === 'inject_files') as unknown as {
      argsinfo: Record<string, { required: boolean }>;
    };
    expect(inject.argsinfo.files!.required).toBe(false);
    // ipa-inject-files-priority makes Ironic run it in every deploy, after write_image (80) when below 80.
    const other = await startImageAgent(loop.path, { 'ipa-inject-files-priority': '50' });
    try {
      const r2 = await runToEnd(other.url, 'deploy.get_deploy_steps', { node: {}, ports: [] });
      const steps = r2.command_result.deploy_steps.GenericHardwareManager as { step: string; priority: number }[];
      expect(steps.map((s) => [s.step, s.priority])).toEqual([
        ['erase_devices_metadata', 0],
        ['clean_uefi_nvram', 0],
        ['write_image', 0],
        ['apply_configuration', 0],
        ['inject_files', 50],
      ]);
    } finally {
      await other.close();
    }
  });

  it('inject_files writes by number, by-partuuid, by-partlabel, by-label and by path; deletes; keeps mode', async () => {
    await writeImage();
    const part = `${loop.path}p1`;
    const partuuid = (await execa('blkid', ['-p', '-s', 'PART_ENTRY_UUID', '-o', 'value', part])).stdout.trim();
    const files = [
      { path: '/by-number.txt', partition: 1, content: b64('one'), mode: 0o600 },
      {
        path: '/etc/by-partuuid.conf',
        partition: `/dev/disk/by-partuuid/${partuuid.toUpperCase()}`,
        content: b64('uuid'),
        dirmode: 0o700,
      },
      { path: '/by-partlabel.txt', partition: '/dev/disk/by-partlabel/root', content: b64('label') },
      { path: '/by-label.txt', partition: '/dev/disk/by-label/inaroot', content: b64('fslabel') },
      { path: '/ina-marker.txt', deleted: true },
    ];
    const r = await deployStep('inject_files', { files });
    expect(r.command_error).toBeNull();
    expect(r.command_result).toEqual({
      deploy_result: null,
      deploy_step: expect.objectContaining({ step: 'inject_files' }),
    });
    expect(await readFrom(part, 'by-number.txt')).toEqual({ text: 'one', mode: 0o600 });
    expect((await readFrom(part, 'etc/by-partuuid.conf'))?.text).toBe('uuid');
    expect((await readFrom(part, 'by-partlabel.txt'))?.text).toBe('label');
    expect((await readFrom(part, 'by-label.txt'))?.text).toBe('fslabel');
    expect(await readFrom(part, 'ina-marker.txt')).toBeNull();
    // no partition: the one whose filesystem holds /etc
    const byPath = await deployStep('inject_files', { files: [{ path: '/etc/by-path.conf', content: b64('path') }] });
    expect(byPath.command_error).toBeNull();
    expect((await readFrom(part, 'etc/by-path.conf'))?.text).toBe('path');
  });

  it('inject_files fetches content given by URL (node fields filled in) before touching a partition', async () => {
    await writeImage();
    const part = `${loop.path}p1`;
    server.serve('n1/motd', 'fetched for n1\n');
    const url = `${server.base}/{node[uuid]}/motd`;
    const r = await deployStep('inject_files', { files: [{ path: '/etc/motd', partition: 1, content: url }] });
    expect(r.command_error).toBeNull();
    expect((await readFrom(part, 'etc/motd'))?.text).toBe('fetched for n1\n');
    expect(server.requests.filter((q) => q.path === 'n1/motd').map((q) => q.status)).toEqual([200]);
    // A URL that answers 404 fails the step, and the file before it in the list was not written either.
    const missing = await deployStep('inject_files', {
      files: [
        { path: '/first.txt', partition: 1, content: b64('first') },
        { path: '/second.txt', partition: 1, content: `${server.base}/nothing-here` },
      ],
    });
    expect(missing.command_status).toBe('FAILED');
    expect(missing.command_error?.details).toMatch(/Cannot fetch the content of \/second.txt from .*nothing-here/);
    expect(await readFrom(part, 'first.txt')).toBeNull();
    // A field the node does not have is refused, not sent as written.
    const unknownField = await deployStep('inject_files', {
      files: [{ path: '/x', partition: 1, content: `${server.base}/{node[nope]}` }],
    });
    expect(unknownField.command_error?.type).toBe('InvalidCommandParamsError');
    expect(unknownField.command_error?.details).toMatch(/no value for \{node\[nope\]\}/);
  });

  it('inject_files refuses a symlink in the image that leads out of the partition, writing nothing outside', async () => {
    await writeImage();
    const part = `${loop.path}p1`;
    const dir = await mkdtemp(join(tmpdir(), 'ina-evil-'));
    await execa('mount', [part, dir]);
    await symlink(tmpdir(), join(dir, 'escape'));
    await execa('umount', [dir]);
    await rmdir(dir);
    const name = `ina-escaped-${process.pid}`;
    const r = await deployStep('inject_files', {
      files: [{ path: `/escape/${name}`, partition: 1, content: b64('x') }],
    });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error?.type).toBe('InvalidCommandParamsError');
    expect(r.command_error?.details).toMatch(/leads outside its filesystem/);
    await expect(stat(join(tmpdir(), name))).rejects.toThrow();
    // A directory to be made below the symlink is not made outside either.
    const deeper = await deployStep('inject_files', {
      files: [{ path: `/escape/${name}/sub/file`, partition: 1, content: b64('x') }],
    });
    expect(deeper.command_error?.details).toMatch(/leads outside its filesystem/);
    await expect(stat(join(tmpdir(), name))).rejects.toThrow();
  });

  it('inject_files with bad files fails with InvalidCommandParamsError and leaves the disk as it was', async () => {
    await writeImage();
    const before = sha256(await readDevice(loop.path, 0, 32 * MiB));
    const r = await deployStep('inject_files', {
      files: [
        { path: '/ok', content: b64('x') },
        { path: 'relative', content: b64('x') },
      ],
    });
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({ type: 'InvalidCommandParamsError', code: 400 });
    expect(r.command_error?.details).toMatch(/^Validation of files failed: files\[1\]\.path/);
    const missing = await deployStep('inject_files', { files: [{ path: '/x', partition: 7, content: b64('x') }] });
    expect(missing.command_error?.type).toBe('DeviceNotFound');
    expect(sha256(await readDevice(loop.path, 0, 32 * MiB))).toBe(before);
  });

  it('erase_devices_metadata as a deploy step wipes the partition table and filesystem signatures', async () => {
    await writeImage();
    expect((await execa('blkid', ['-p', '-o', 'value', '-s', 'PTTYPE', loop.path])).stdout.trim()).toBe('gpt');
    const r = await deployStep('erase_devices_metadata', {});
    expect(r.command_error).toBeNull();
    expect(r.command_result.deploy_result).toBeNull();
    const probe = await execa('blkid', ['-p', loop.path], { reject: false });
    expect(probe.stdout).not.toMatch(/PTTYPE/);
    const head = await readDevice(loop.path, 0, MiB);
    expect(head.subarray(512, 520).toString('latin1')).not.toBe('EFI PART');
  });

  it('reads the skip list from the node the conductor sends with the step, not from an older copy', async () => {
    await writeImage();
    // The agent's copy so far has no skip list (the steps above sent none); this step's node protects the disk.
    const r = await deployStep('erase_devices_metadata', {}, { skip_block_devices: [{ name: loop.path }] });
    expect(r.command_error).toBeNull();
    expect((await execa('blkid', ['-p', '-o', 'value', '-s', 'PTTYPE', loop.path])).stdout.trim()).toBe('gpt');
  });

  it('an unknown deploy step is HardwareManagerMethodNotFound', async () => {
    const r = await deployStep('execute_bootc_install', {});
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error?.type).toBe('HardwareManagerMethodNotFound');
  });
});
