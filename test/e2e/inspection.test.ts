// In-band inspection of a QEMU machine with known hardware: 2 vCPUs, a chosen memory size, two NICs with
// fixed MACs, a virtio disk and an NVMe disk with set serial numbers, and SMBIOS system strings. The
// ramdisk's agent gets only the callback URL (Ironic's managed inspection without fast track); the test
// stands in for Ironic's /v1/continue_inspection and checks that the posted inventory carries exactly those
// values, and that the console reports the collection time.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, truncate, writeFile } from 'node:fs/promises';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { workDir } from '../helpers/make-image.ts';
import { HOST_IN_GUEST, OUT, startVm, until, type Vm } from './vm.ts';

const CALLBACK_PORT = 5050;
const MEMORY_MIB = 1280;
const MACS = ['52:54:00:1a:00:01', '52:54:00:1a:00:02'];
const NVME_SERIAL = 'INANVME0042';
const SMBIOS = { manufacturer: 'INA Test Works', product: 'Inspector 9000', serial: 'SN-INA-21', sku: 'INA-9000-S' };
const GiB = 1024 ** 3;

let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm | undefined;
let server: Server;
const posts: { headers: Record<string, unknown>; body: Record<string, any> }[] = [];

beforeAll(async () => {
  work = await workDir('ina-e2e-inspect-');
  server = createServer(async (req, res) => {
    let raw = '';
    for await (const c of req) raw += c;
    posts.push({ headers: req.headers, body: JSON.parse(raw) });
    res
      .writeHead(202, { 'content-type': 'application/json' })
      .end(JSON.stringify({ uuid: '8a1b6f0e-8c2d-4f43-9a55-2e6f3f1d0b21' }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
});

afterAll(async () => {
  if (vm) {
    await vm.kill();
    await writeFile(join(OUT, 'e2e-serial-inspection.log'), vm.serial());
  }
  await new Promise((r) => server.close(r));
  await work?.cleanup();
});

async function disk(name: string, bytes: number): Promise<string> {
  const path = join(work.dir, name);
  await writeFile(path, '');
  await truncate(path, bytes);
  return path;
}

describe('inspection of a QEMU machine', () => {
  it('posts exactly the machine QEMU was given', async () => {
    const vda = await disk('vda.img', 5 * GiB);
    const nvme = await disk('nvme.img', 3 * GiB);
    const hostPort = (server.address() as AddressInfo).port;
    vm = await startVm({
      disk: vda,
      nvme: [{ file: nvme, serial: NVME_SERIAL }],
      serialLog: join(work.dir, 'serial.log'),
      mac: MACS[0]!,
      moreNics: [MACS[1]!],
      smp: 2,
      memoryMiB: MEMORY_MIB,
      smbios: [
        `type=1,manufacturer=${SMBIOS.manufacturer},product=${SMBIOS.product},serial=${SMBIOS.serial},sku=${SMBIOS.sku}`,
      ],
      forwards: [{ guestPort: CALLBACK_PORT, hostPort }],
      append: () =>
        `ipa-inspection-callback-url=http://${HOST_IN_GUEST}:${CALLBACK_PORT}/v1/continue_inspection ` +
        `ipa-inspection-collectors=default,pci-devices,dmi-decode,logs BOOTIF=01-${MACS[0]!.replaceAll(':', '-')} ipa-inspection-dhcp-wait-timeout=30`,
    });
    const t0 = Date.now();
    await until('the inspection POST', async () => (posts.length > 0 ? true : undefined), 600_000, 500);
    process.stdout.write(
      `[e2e] inspection posted ${((Date.now() - t0) / 1000).toFixed(1)} s after QEMU started (${vm.accel})\n`,
    );
    const { headers, body } = posts[0]!;
    expect(headers['x-openstack-ironic-api-version']).toBeUndefined();
    expect(body.error).toBeNull();
    const inv = body.inventory;
    expect(inv.cpu).toMatchObject({ count: 2, architecture: 'x86_64', socket_count: 1 });
    expect(inv.memory.physical_mb).toBe(MEMORY_MIB);
    expect(inv.memory.total).toBeGreaterThan(0.8 * MEMORY_MIB * 1048576);
    expect(inv.memory.total).toBeLessThanOrEqual(MEMORY_MIB * 1048576);
    expect(inv.interfaces.map((i: any) => i.mac_address).sort()).toEqual(MACS);
    expect(inv.interfaces.find((i: any) => i.mac_address === MACS[0])).toMatchObject({
      vendor: '0x1af4',
      driver: 'virtio_net',
      has_carrier: true,
    });
    const byName = Object.fromEntries(inv.disks.map((d: any) => [d.name, d]));
    expect(Object.keys(byName).sort()).toEqual(['/dev/nvme0n1', '/dev/vda']);
    expect(byName['/dev/vda']).toMatchObject({
      size: 5 * GiB,
      serial: 'E2EDISK0',
      rotational: true,
      by_path: expect.stringMatching(/^\/dev\/disk\/by-path\/pci-0000:00:/),
    });
    expect(byName['/dev/nvme0n1']).toMatchObject({
      size: 3 * GiB,
      serial: NVME_SERIAL,
      model: 'QEMU NVMe Ctrl',
      tran: 'nvme',
      rotational: false,
    });
    expect(inv.system_vendor).toMatchObject({
      manufacturer: SMBIOS.manufacturer,
      // lshw's form (IPA's source): the SKU in parentheses.
      product_name: `${SMBIOS.product} (${SMBIOS.sku})`,
      serial_number: SMBIOS.serial,
    });
    expect(inv.system_vendor.firmware.vendor).not.toBe('');
    expect(inv.boot).toEqual({ current_boot_mode: 'bios', pxe_interface: `01-${MACS[0]!.replaceAll(':', '-')}` });
    expect(inv.bmc_address).toBeNull();
    expect(body.root_disk.name).toBe('/dev/vda');
    expect(body.pci_devices.some((d: any) => d.vendor_id === '1b36' || d.class === '010802')).toBe(true);
    expect(body.dmi.memory.devices.length).toBeGreaterThan(0);
    // the logs collector's archive carries the agent's log, with the time each inventory part took
    await writeFile(join(work.dir, 'logs.tar.gz'), Buffer.from(body.logs, 'base64'));
    execFileSync('tar', ['-xzf', 'logs.tar.gz', './agent.log'], { cwd: work.dir });
    const collected = (await readFile(join(work.dir, 'agent.log'), 'utf8'))
      .split('\n')
      .map((l) => (l.startsWith('{') ? JSON.parse(l) : {}))
      .find((l) => l.msg === 'hardware inventory collected');
    expect(collected).toMatchObject({ collectionMs: expect.any(Number), partsMs: expect.any(Object) });
    process.stdout.write(
      `[e2e] inventory parts (ms from the start, run at once): ${JSON.stringify(collected.partsMs)}\n`,
    );
    // the console's status page reports the inspection and how long the inventory took
    const shown = await until(
      'the console to show the inventory',
      async () => /collected in (\d+) ms/.exec(vm!.serial()) ?? undefined,
      60_000,
      500,
    );
    const ms = Number(shown[1]);
    process.stdout.write(`[e2e] inventory collected in ${ms} ms under ${vm.accel}\n`);
    expect(ms).toBeGreaterThan(0);
    // and the agent stays up for the conductor
    await until(
      'the console to show the result',
      async () => /Inspection\s+done: HTTP 202/.test(vm!.serial()) || undefined,
      60_000,
      500,
    );
  }, 900_000);
});
