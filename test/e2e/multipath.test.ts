// Multipath in the built ramdisk under QEMU: one disk image exposed as two SCSI paths (one virtio-scsi
// controller, two scsi-hd devices on the same file with the same serial and WWN), which the ramdisk's
// multipath-tools assembles into one dm map at start. One boot: the inventory posted to the inspection callback
// shows one disk for the LUN; a deploy writes the map (the host reads the image back from the backing file);
// erase_devices_metadata erases it once; root device hints naming one path alone are refused, naming the map.
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FakeConductor } from '../helpers/fake-conductor.ts';
import { readDevice } from '../helpers/image-agent.ts';
import { startImageServer, type ImageServer } from '../helpers/image-server.ts';
import { makeDiskImage, workDir } from '../helpers/make-image.ts';
import { HOST_IN_GUEST, OUT, randomMac, startVm, until, type Vm } from './vm.ts';

const CONDUCTOR_PORT = 6385;
const IMAGES_PORT = 8080;
const CALLBACK_PORT = 5050;
const MiB = 1024 * 1024;
const GiB = 1024 * MiB;
const LUN_SERIAL = 'E2ESANLUN0';
const LUN_WWN = '0x5000c50015ea71ac';

let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm | undefined;
let conductor: FakeConductor | undefined;
let images: ImageServer | undefined;
let callback: Server | undefined;
const inventories: Record<string, any>[] = [];

beforeAll(async () => {
  work = await workDir('ina-e2e-mpath-');
});

afterAll(async () => {
  if (vm) {
    await vm.kill();
    await writeFile(join(OUT, 'e2e-serial-multipath.log'), vm.serial());
  }
  await conductor?.close();
  await images?.close();
  if (callback) await new Promise((r) => callback!.close(r));
  await work?.cleanup();
});

function report(line: string): void {
  process.stdout.write(`[e2e] ${line}\n`);
}

async function sparse(name: string, bytes: number): Promise<string> {
  const path = join(work.dir, name);
  await writeFile(path, '');
  await truncate(path, bytes);
  return path;
}

describe('a SAN LUN over two paths in the ramdisk under QEMU', () => {
  it('is one disk (the dm map) in the inventory, a deploy writes the map, erase runs once on it, a path alone is refused', async () => {
    const t0 = Date.now();
    callback = createServer(async (req, res) => {
      let raw = '';
      for await (const c of req) raw += c;
      inventories.push(JSON.parse(raw).inventory);
      res.writeHead(202, { 'content-type': 'application/json' }).end('{}');
    });
    await new Promise<void>((r) => callback!.listen(0, '127.0.0.1', r));
    const mac = randomMac();
    conductor = await FakeConductor.start();
    const node = conductor.addNode({ macs: [mac] });
    images = await startImageServer();
    const img = await makeDiskImage(work.dir, { sizeMiB: 8, table: 'gpt' });
    const imageUrl = new URL(await images.serveFile('disk.raw', img.path));
    const raw = await readFile(img.path);
    // The virtio disk is too small to be a root device: without hints the deploy must pick the LUN.
    const vda = await sparse('vda.img', 64 * MiB);
    const lun = await sparse('lun.img', 5 * GiB);

    vm = await startVm({
      disk: vda,
      multipathLun: { file: lun, serial: LUN_SERIAL, wwn: LUN_WWN, paths: 2 },
      serialLog: join(work.dir, 'serial.log'),
      mac,
      forwards: [
        { guestPort: CONDUCTOR_PORT, hostPort: Number(new URL(conductor.url).port) },
        { guestPort: IMAGES_PORT, hostPort: Number(imageUrl.port) },
        { guestPort: CALLBACK_PORT, hostPort: (callback.address() as AddressInfo).port },
      ],
      append: (port) =>
        `ipa-api-url=http://${HOST_IN_GUEST}:${CONDUCTOR_PORT} ipa-advertise-host=127.0.0.1 ipa-advertise-port=${port} ` +
        `ipa-inspection-callback-url=http://${HOST_IN_GUEST}:${CALLBACK_PORT}/v1/continue_inspection ipa-debug=1`,
    });
    const v = vm;
    const c = conductor;
    await c.waitFor(() => c.heartbeats.some((h) => h.status === 202), 'a heartbeat', 400_000);
    report(`boot -> first heartbeat ${((Date.now() - v.startedAt) / 1000).toFixed(1)} s (${v.accel})`);

    // The inventory: vda and one disk for the LUN, the map, with the LUN's serial and WWN; no sdX path.
    const inventory = await until('the inspection POST', async () => inventories[0], 10_000);
    const disks = inventory.disks as Record<string, any>[];
    const names = disks.map((d) => d.name as string);
    expect(names.filter((n) => /^\/dev\/sd/.test(n))).toEqual([]);
    const luns = disks.filter((d) => d.serial === LUN_SERIAL);
    expect(luns, JSON.stringify(disks)).toHaveLength(1);
    const map = luns[0]!;
    expect(map.name).toMatch(/^\/dev\/(dm-\d+|mapper\/\S+)$/);
    expect(map).toMatchObject({ size: 5 * GiB, wwn: LUN_WWN, hctl: null });
    expect(names).toEqual(expect.arrayContaining(['/dev/vda', map.name]));
    expect(names).toHaveLength(2);

    const agent = c.clientFor(node.uuid, { pollIntervalMs: 1000, pollAttempts: 600 });
    const imageInfo = {
      id: 'e2e-mpath',
      urls: [`http://${HOST_IN_GUEST}:${IMAGES_PORT}${imageUrl.pathname}`],
      disk_format: 'raw',
      container_format: 'bare',
      stream_raw_images: true,
      os_hash_algo: 'sha256',
      os_hash_value: createHash('sha256').update(raw).digest('hex'),
    };

    // prepare_image without hints: the smallest disk of at least 4 GiB is the LUN, written through its map.
    const tDeploy = Date.now();
    await agent.command('standby.prepare_image', { image_info: imageInfo, configdrive: null });
    const prepared = await agent.waitForCommand('standby.prepare_image');
    expect(prepared.command_error).toBeNull();
    expect(prepared.command_status).toBe('SUCCEEDED');
    expect(JSON.stringify(prepared.command_result)).toContain(`written to device ${map.name}`);
    report(`prepare_image onto the map: ${((Date.now() - tDeploy) / 1000).toFixed(1)} s`);
    // The host reads the LUN's backing file: the image's partition, byte for byte.
    const { start, end } = img.partition;
    expect((await readDevice(lun, start, end)).equals(raw.subarray(start, end))).toBe(true);

    // erase_devices_metadata: once per LUN, on the map; the paths are never targets.
    await agent.command('clean.execute_clean_step', {
      step: { step: 'erase_devices_metadata', priority: 99, interface: 'deploy', reboot_requested: false },
      node: { uuid: node.uuid, properties: {}, instance_info: {}, driver_internal_info: {} },
      ports: [],
      clean_version: {},
    });
    const cleaned = await agent.waitForCommand('clean.execute_clean_step');
    expect(cleaned.command_error).toBeNull();
    expect(cleaned.command_status).toBe('SUCCEEDED');
    const erasedLine = v
      .serial()
      .split('\n')
      .filter((l) => l.includes('disk metadata erased'))
      .at(-1);
    expect(erasedLine).toBeDefined();
    const erased = [...erasedLine!.matchAll(/\/dev\/[\w/.-]+/g)].map((m) => m[0]);
    expect(erased.sort()).toEqual([map.name, '/dev/vda'].sort());
    expect((await readDevice(lun, 0, MiB)).every((b) => b === 0)).toBe(true);
    // Last (the step keeps the node it was given): hints naming one path alone are refused, naming the map;
    // nothing is written (the LUN was erased just before).
    const started = await agent.command('deploy.execute_deploy_step', {
      step: {
        interface: 'deploy',
        step: 'write_image',
        priority: 80,
        reboot_requested: false,
        args: { image_info: imageInfo },
      },
      node: { uuid: node.uuid, properties: { root_device: { name: '/dev/sdb' } }, instance_info: {} },
      ports: [],
      deploy_version: {},
    });
    expect(started.command_status).toBe('RUNNING');
    const refused = await agent.waitForCommand('deploy.execute_deploy_step');
    expect(refused.command_status).toBe('FAILED');
    const refusal = JSON.stringify(refused.command_error);
    expect(refusal).toMatch(/\/dev\/sdb, a path of \/dev\/dm-\d+ \(multipath map/);
    expect((await readDevice(lun, 0, MiB)).every((b) => b === 0)).toBe(true);

    report(`multipath e2e: ${((Date.now() - t0) / 1000).toFixed(1)} s in all (${v.accel})`);
  });
});
