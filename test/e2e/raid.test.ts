// Software RAID in the built ramdisk under QEMU (this machine's kernel has no md): one boot with three blank
// virtio disks, then the cases through the agent's API as Ironic sends them: a refusal that touches no disk,
// create_configuration with a RAID-1 and a RAID-0 of the rest (MAX), the md devices among the disks the agent
// sees (the list the inventory and root-device choice read) with the members protected, delete_configuration
// leaving no superblock and no table, and the apply_configuration deploy step on all disks.
import { open, stat, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { request } from 'undici';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workDir } from '../helpers/make-image.ts';
import { OUT, randomMac, startVm, until, type Vm } from './vm.ts';

const GiB = 2 ** 30;
const MiB = 2 ** 20;
const NODE_UUID = 'f6a0c9a4-4a8b-4f3e-9d7a-5b1c2d3e4f50';
let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm;
let disks: string[];
const started = Date.now();

function report(line: string): void {
  process.stdout.write(`[e2e raid] ${line}\n`);
}

beforeAll(async () => {
  work = await workDir('ina-e2e-raid-');
  disks = [];
  for (const name of ['vda', 'vdb', 'vdc']) {
    const path = join(work.dir, `${name}.img`);
    await writeFile(path, '');
    await truncate(path, 3 * GiB);
    disks.push(path);
  }
  vm = await startVm({
    disk: disks[0]!,
    moreDisks: disks.slice(1),
    serialLog: join(work.dir, 'serial.log'),
    mac: randomMac(),
    forwards: [],
    // No download retries: the write_image probes below fail at a download nobody serves, after the device choice.
    append: () => 'standalone=1 ipa-debug=1 ipa-image-download-connection-retries=0',
  });
  await until('GET /v1/status', () => agentStatus(vm), 300_000);
  report(`booted in ${((Date.now() - vm.startedAt) / 1000).toFixed(1)} s (${vm.accel})`);
});

afterAll(async () => {
  if (vm) {
    await vm.kill();
    await writeFile(join(OUT, 'e2e-serial-raid.log'), vm.serial());
  }
  await work?.cleanup();
  report(`whole file took ${((Date.now() - started) / 1000).toFixed(1)} s`);
});

async function agentStatus(v: Vm): Promise<true | undefined> {
  const r = await request(`http://127.0.0.1:${v.agentPort}/v1/status`, { headersTimeout: 2000, bodyTimeout: 2000 });
  await r.body.dump();
  return r.statusCode === 200 ? true : undefined;
}

interface Result {
  command_status: string;
  command_result: Record<string, any> | null;
  command_error: { type: string; details: string } | null;
}

async function command(name: string, params: Record<string, unknown>): Promise<Result> {
  const t0 = Date.now();
  const r = await request(`http://127.0.0.1:${vm.agentPort}/v1/commands/?wait=true`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ name, params }),
    headersTimeout: 0,
    bodyTimeout: 0,
  });
  expect(r.statusCode).toBe(200);
  const body = (await r.body.json()) as Result;
  const step = (params.step as { step?: string } | undefined)?.step ?? '';
  report(`${name} ${step}: ${body.command_status} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
  return body;
}

const node = (extra: Record<string, unknown> = {}) => ({
  uuid: NODE_UUID,
  properties: {},
  instance_info: {},
  driver_internal_info: {},
  ...extra,
});

const raidStep = (step: string, priority = 0) => ({
  step,
  priority,
  interface: 'raid',
  reboot_requested: false,
  abortable: true,
  args: {},
});

const clean = (step: string, n: Record<string, unknown>) =>
  command('clean.execute_clean_step', { step: raidStep(step), node: n, ports: [], clean_version: {} });

/**
 * The devices the agent sees, and why it would not deploy onto each: asked by a root device hint no disk
 * matches, whose refusal lists every device (the lsblk view the inventory also reads) with the guard's verdict.
 */
async function devicesSeen(): Promise<string> {
  const r = await writeImage({ name: '/dev/nosuch' });
  expect(r.command_error?.type).toBe('DeviceNotFound');
  return r.command_error!.details;
}

/** write_image of an image no server serves, onto the device `hints` choose: the choice is made before the download. */
function writeImage(hints: Record<string, unknown>): Promise<Result> {
  return command('deploy.execute_deploy_step', {
    step: {
      step: 'write_image',
      priority: 0,
      interface: 'deploy',
      reboot_requested: false,
      args: {
        image_info: {
          id: 'none',
          urls: ['http://127.0.0.1:9/none.raw'],
          disk_format: 'raw',
          os_hash_algo: 'sha256',
          os_hash_value: '0'.repeat(64),
        },
        configdrive: null,
      },
    },
    node: node({ instance_info: { root_device: hints } }),
    ports: [],
    deploy_version: {},
  });
}

/** The size the refusal lists for /dev/<name>, in GiB. */
function gib(seen: string, name: string): number {
  const m = new RegExp(`/dev/${name} \\((\\d+\\.\\d+) GiB\\)`).exec(seen);
  expect(m, `/dev/${name} among the devices seen`).not.toBeNull();
  return Number(m![1]);
}

/** Bytes of a disk file, as the host reads it (QEMU writes through to the file). */
async function bytesAt(file: string, at: number, length: number): Promise<Buffer> {
  const fh = await open(file, 'r');
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, at);
    return buf;
  } finally {
    await fh.close();
  }
}

const MD_MAGIC = Buffer.from([0xfc, 0x4e, 0x2b, 0xa9]);
const software = (d: Record<string, unknown>) => ({ controller: 'software', ...d });
const pair = [{ name: '/dev/vda' }, { name: '/dev/vdb' }];

describe('software RAID in the ramdisk under QEMU', () => {
  it('refuses an invalid target_raid_config before any disk is touched', async () => {
    const r = await clean(
      'create_configuration',
      node({
        target_raid_config: {
          logical_disks: [software({ size_gb: 1, raid_level: '0' }), software({ size_gb: 'MAX', raid_level: '6' })],
        },
      }),
    );
    expect(r.command_status).toBe('FAILED');
    expect(r.command_error).toMatchObject({
      type: 'SoftwareRAIDError',
      details:
        `Could not validate Software RAID config for ${NODE_UUID}: ` +
        'Software RAID Configuration requires RAID-1 for the first logical disk; ' +
        'Software RAID configuration is not possible for RAID level 6 with only 3 block devices found.',
    });
    // Sparse files nothing was written to: no block allocated.
    for (const d of disks) expect((await stat(d)).blocks).toBe(0);
  });

  it('create_configuration: a RAID-1 named root and a RAID-0 of the rest (MAX), on vda and vdb', async () => {
    const target = {
      logical_disks: [
        software({ size_gb: 1, raid_level: '1', volume_name: 'root', physical_disks: pair }),
        software({ size_gb: 'MAX', raid_level: '0', physical_disks: pair }),
      ],
    };
    const r = await clean('create_configuration', node({ target_raid_config: target }));
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ clean_result: target });

    // BIOS boot (SeaBIOS), no disk_label: an msdos table on each holder, the RAID-1 partition from parted's
    // first free sector to 1 GiB, the RAID-0 one from there to the end; a 1.2 superblock 4 KiB into each.
    for (const d of disks.slice(0, 2)) {
      const mbr = await bytesAt(d, 0, 512);
      expect(mbr.subarray(510).toString('hex')).toBe('55aa');
      const entry = (i: number) => mbr.subarray(446 + 16 * i, 462 + 16 * i);
      expect(entry(0)[4]).toBe(0x83);
      const p1Start = entry(0).readUInt32LE(8);
      const p1Sectors = entry(0).readUInt32LE(12);
      expect(p1Start).toBe(2048);
      expect((p1Start + p1Sectors) * 512).toBe(GiB);
      expect(entry(1).readUInt32LE(8) * 512).toBe(GiB);
      expect((await bytesAt(d, p1Start * 512 + 4096, 4)).equals(MD_MAGIC)).toBe(true);
    }
    expect((await stat(disks[2]!)).blocks).toBe(0);

    const seen = await devicesSeen();
    report(`devices seen: ${seen}`);
    // md0: the RAID-1 of two 1023 MiB partitions; md1: the RAID-0 of two 2 GiB ones; less mdadm's data offset
    // (the message rounds to 0.01 GiB).
    expect(gib(seen, 'md0')).toBeGreaterThan(0.9);
    expect(gib(seen, 'md0')).toBeLessThanOrEqual(1);
    expect(gib(seen, 'md1')).toBeGreaterThan(3.8);
    expect(gib(seen, 'md1')).toBeLessThan(4);
    // A holder, written alone, would corrupt the arrays: the guard refuses it, and so the root device choice.
    expect(seen).toMatch(
      /\/dev\/vda \(3\.00 GiB, serial E2EDISK0\): protected, it is the holder of vda\d, a member of the software RAID array md\d/,
    );
    expect(seen).toMatch(/\/dev\/vdc \(3\.00 GiB, serial E2EDISK2\)(;|$)/);
    const serial = vm.serial();
    expect(serial).toContain('md array created');
  });

  it('delete_configuration stops the arrays, clears the superblocks and the holders’ tables', async () => {
    const r = await clean('delete_configuration', node());
    expect(r.command_error).toBeNull();
    const seen = await devicesSeen();
    expect(seen).not.toContain('/dev/md');
    expect(seen).not.toContain('protected');
    for (const d of disks.slice(0, 2)) {
      expect((await bytesAt(d, 510, 2)).toString('hex')).toBe('0000');
      expect((await bytesAt(d, 2048 * 512 + 4096, 4)).equals(MD_MAGIC)).toBe(false);
      expect((await bytesAt(d, GiB + 4096, 4)).equals(MD_MAGIC)).toBe(false);
    }
  });

  it('apply_configuration (deploy step) builds a RAID-1 of all disks from its raid_config argument', async () => {
    const raidConfig = { logical_disks: [software({ size_gb: 'MAX', raid_level: '1' })] };
    const r = await command('deploy.execute_deploy_step', {
      step: {
        step: 'apply_configuration',
        priority: 0,
        interface: 'raid',
        reboot_requested: false,
        args: { raid_config: raidConfig, delete_existing: true },
      },
      node: node(),
      ports: [],
      deploy_version: {},
    });
    expect(r.command_error).toBeNull();
    expect(r.command_result).toMatchObject({ deploy_result: raidConfig });
    const seen = await devicesSeen();
    expect(gib(seen, 'md0')).toBeGreaterThan(2.8);
    expect(gib(seen, 'md0')).toBeLessThanOrEqual(3);
    for (const dev of ['vda', 'vdb', 'vdc'])
      expect(seen).toMatch(
        new RegExp(
          `/dev/${dev} \\([^)]*\\): protected, it is the holder of ${dev}1, a member of the software RAID array md0`,
        ),
      );
    for (const d of disks) expect((await bytesAt(d, MiB + 4096, 4)).equals(MD_MAGIC)).toBe(true);
    // The array is a root device candidate: the name hint chooses it, and the write fails only at the download.
    const onto = await writeImage({ name: 's== /dev/md0' });
    expect(onto.command_error?.type).not.toBe('DeviceNotFound');
    expect(vm.serial()).toMatch(/root device chosen[^\n]*\/dev\/md0|\/dev\/md0[^\n]*root device chosen/);
  });
});
