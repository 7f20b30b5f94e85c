// The inventory of a real kernel's tree with a bond and a VLAN: test/fixtures/inspect/bond-vlan-qemu, recorded
// by scripts/inspect/record-in-vm.ts from the project's ramdisk (Debian's kernel) in QEMU. eth0 and eth1 are
// bonded (active-backup), so both show the bond's MAC in sysfs; VLAN 100 sits on the bond. The machine has
// SMBIOS strings, 1536 MiB, a virtio system disk, an NVMe disk and the small virtio disk the tree left on.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { HostRoot } from '../../agent/inspect/host-root.ts';
import { collectInventory, guessRootDisk, inventorySummary, type Inventory } from '../../agent/inspect/inventory.ts';

const dir = join(import.meta.dirname, '..', 'fixtures/inspect/bond-vlan-qemu');
const root = new HostRoot(dir);

describe('recorded: a server with a bond and a VLAN (Debian kernel in QEMU)', () => {
  let inv: Inventory;
  beforeAll(async () => {
    inv = await collectInventory({
      root,
      lsblk: async () => readFileSync(join(dir, 'lsblk.json'), 'utf8'),
      ipmitool: async () => {
        throw new Error('ipmitool must not run without /dev/ipmi*');
      },
      addresses: JSON.parse(readFileSync(join(dir, 'addresses.json'), 'utf8')),
    });
  });

  it('the recording is what the kernel shows for a bond: both members carry the bond MAC in sysfs', async () => {
    expect(await root.read('/sys/class/net/eth1/address')).toBe('52:54:00:b0:0d:01');
    expect(await root.read('/sys/class/net/bond0/bonding/slaves')).toBe('eth0 eth1');
    expect(await root.read('/proc/net/bonding/bond0')).toMatch(/Permanent HW addr: 52:54:00:b0:0d:02/);
  });

  it('lists the bond, its VLAN and both members, each member by its permanent MAC', () => {
    expect(inv.interfaces.map((i) => [i.name, i.mac_address, i.driver, i.has_carrier])).toEqual([
      ['bond0', '52:54:00:b0:0d:01', null, true],
      ['bond0.100', '52:54:00:b0:0d:01', null, true],
      ['eth0', '52:54:00:b0:0d:01', 'virtio_net', true],
      ['eth1', '52:54:00:b0:0d:02', 'virtio_net', true],
    ]);
    expect(inv.interfaces.find((i) => i.name === 'bond0.100')).toMatchObject({
      ipv4_address: '198.51.100.10',
      ipv6_address: '2001:db8:100::10',
      vendor: null,
      product: null,
      pci_address: null,
      speed_mbps: null,
    });
    expect(inv.interfaces.find((i) => i.name === 'bond0')?.ipv4_address).toBe('192.0.2.10');
    expect(inv.interfaces.find((i) => i.name === 'eth1')).toMatchObject({ ipv4_address: null, vendor: '0x1af4' });
  });

  it('lookup sends every MAC Ironic may know the node by, each once: both NICs, not only the bond', async () => {
    expect(await nicMacs(root)).toEqual(['52:54:00:b0:0d:01', '52:54:00:b0:0d:02']);
  });

  it('system_vendor from DMI, physical memory from the SMBIOS memory devices', () => {
    expect(inv.system_vendor).toEqual({
      product_name: 'Bonded Server B2',
      serial_number: 'REC-BOND-0001',
      manufacturer: 'INA Recorded Systems',
      firmware: { vendor: 'SeaBIOS recorded', version: '1.16.2-rec', build_date: '04/01/2014' },
    });
    expect(inv.memory.physical_mb).toBe(1536);
    expect(inv.memory.total).toBe(1533952000);
    expect(inv.cpu).toMatchObject({ count: 2, architecture: 'x86_64', socket_count: 1 });
  });

  it('disks: serials from sysfs where lsblk (no udev) has none; the NVMe by its controller; loops left out', () => {
    expect(inv.disks.map((d) => [d.name, d.size, d.serial, d.tran, d.by_path])).toEqual([
      ['/dev/vda', 8589934592, 'RECSYS0', null, '/dev/disk/by-path/pci-0000:00:03.0'],
      ['/dev/vdb', 67108864, 'RECTAPE', null, '/dev/disk/by-path/pci-0000:00:07.0'],
      ['/dev/nvme0n1', 2147483648, 'RECNVME0001', 'nvme', '/dev/disk/by-path/pci-0000:00:04.0-nvme-1'],
    ]);
    expect(inv.disks.find((d) => d.name === '/dev/nvme0n1')).toMatchObject({
      model: 'QEMU NVMe Ctrl',
      rotational: false,
    });
    expect(guessRootDisk(inv.disks)?.name).toBe('/dev/vda');
    expect(inv.bmc_address).toBeNull();
    expect(inv.hostname).toBe('rec-bond-vlan');
    expect(inventorySummary(inv)).toBe(
      '2 CPU x86_64, 1536 MiB, 3 disks, 4 NICs, INA Recorded Systems Bonded Server B2',
    );
  });
});
