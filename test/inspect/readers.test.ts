// The inventory readers over machine trees: one recorded from this host (a VM without DMI,
// test/fixtures/inspect/vm-no-dmi, by scripts/inspect/record-fixture.ts) and a server and a laptop
// built in the kernel's layout (bond + VLANs + IPoIB + NVMe/SATA + DMI; a Wi-Fi laptop with UEFI and USB).
import { readFileSync } from 'node:fs';
import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { readCpu } from '../../agent/inspect/cpu.ts';
import { HostRoot } from '../../agent/inspect/host-root.ts';
import { collectInventory, guessRootDisk, inventorySummary, type Inventory } from '../../agent/inspect/inventory.ts';
import { infinibandIds } from '../../agent/inspect/interfaces.ts';
import { memoryDeviceMiB } from '../../agent/inspect/memory.ts';
import { readNumaTopology, parseCpuList } from '../../agent/inspect/collectors/numa-topology.ts';
import { readPciDevices } from '../../agent/inspect/collectors/pci-devices.ts';
import { readUsbDevices } from '../../agent/inspect/collectors/usb-devices.ts';
import { groupDmi, parseDmidecode } from '../../agent/inspect/collectors/dmi-decode.ts';
import { buildTree, smbiosMemoryDevice } from '../helpers/sys-tree.ts';

const FIXTURES = join(import.meta.dirname, '..', 'fixtures/inspect');
const noIpmi = async () => {
  throw new Error('ipmitool must not run without /dev/ipmi*');
};

describe('recorded: a VM without DMI (this host)', () => {
  const dir = join(FIXTURES, 'vm-no-dmi');
  let inv: Inventory;
  beforeAll(async () => {
    inv = await collectInventory({
      root: new HostRoot(dir),
      lsblk: async () => readFileSync(join(dir, 'lsblk.json'), 'utf8'),
      ipmitool: noIpmi,
      addresses: JSON.parse(readFileSync(join(dir, 'addresses.json'), 'utf8')),
    });
  });

  it('has every inventory key, with IPA types, and no bmc_mac', () => {
    expect(Object.keys(inv).sort()).toEqual(
      [
        'bmc_address',
        'bmc_v6address',
        'boot',
        'cpu',
        'disks',
        'hostname',
        'interfaces',
        'memory',
        'system_vendor',
      ].sort(),
    );
    expect(typeof inv.cpu.frequency).toBe('string');
  });

  it('reads the CPU as lscpu does', () => {
    expect(inv.cpu).toMatchObject({
      model_name: 'AMD EPYC',
      frequency: '2095.9990',
      count: 2,
      architecture: 'x86_64',
      socket_count: 1,
    });
    expect(inv.cpu.flags).toContain('sse4_2');
    expect(inv.cpu.flags).toHaveLength(93);
  });

  it('memory: MemTotal in bytes; without DMI the online memory blocks give physical_mb', () => {
    expect(inv.memory).toEqual({ total: 24683756 * 1024, physical_mb: 192 * 128 });
  });

  it('lists the virtio NIC only (not lo, not the ifb devices), with addresses and driver', () => {
    expect(inv.interfaces).toEqual([
      {
        name: 'eth0',
        mac_address: '02:fc:00:00:00:01',
        ipv4_address: '192.0.2.2',
        ipv6_address: 'fd00::2',
        has_carrier: true,
        lldp: null,
        vendor: '0x1af4',
        product: '0x0001',
        client_id: null,
        biosdevname: null,
        speed_mbps: null,
        pci_address: 'virtio2',
        driver: 'virtio_net',
      },
    ]);
  });

  it('lists the virtio disk with its serial, sector sizes and by-path, and no loop devices', () => {
    expect(inv.disks).toEqual([
      {
        name: '/dev/vda',
        model: null,
        size: 274877906944,
        rotational: true,
        wwn: null,
        serial: '1546636038412268',
        vendor: '0x1af4',
        wwn_with_extension: null,
        wwn_vendor_extension: null,
        hctl: null,
        by_path: '/dev/disk/by-path/pci-0000:00:02.0',
        logical_sectors: 512,
        physical_sectors: 4096,
        tran: null,
      },
    ]);
    expect(guessRootDisk(inv.disks)?.name).toBe('/dev/vda');
  });

  it('empty system_vendor strings, BIOS boot, no BMC, hostname from the kernel', () => {
    expect(inv.system_vendor).toEqual({
      product_name: '',
      serial_number: '',
      manufacturer: '',
      firmware: { vendor: '', version: '', build_date: '' },
    });
    expect(inv.boot).toEqual({ current_boot_mode: 'bios', pxe_interface: null });
    expect(inv.bmc_address).toBeNull();
    expect(inv.bmc_v6address).toBeNull();
    expect(inv.hostname).toBe('vm');
    expect(inventorySummary(inv)).toBe('2 CPU x86_64, 24576 MiB, 1 disk, 1 NIC');
  });

  it('collectors: PCI devices as hex ids without 0x, NUMA topology', async () => {
    const root = new HostRoot(dir);
    const pci = await readPciDevices(root);
    expect(pci.find((d) => d.bus === '0000:00:03.0')).toMatchObject({ vendor_id: '1af4', numa_node_id: '-1' });
    expect(pci).toHaveLength(6);
    const numa = await readNumaTopology(root);
    expect(numa.ram).toEqual([{ numa_node: 0, size_kb: 24683756 }]);
    expect(numa.cpus.map((c) => c.numa_node)).toEqual([0, 0]);
    // virtio-net's `device` is the virtio bus device, which has no numa_node (its PCI parent does)
    expect(numa.nics).toEqual([]);
    expect(await readUsbDevices(root)).toEqual([]);
  });
});

const PCI = 'sys/devices/pci0000:00';
function nic(name: string, pci: string, mac: string, extra: Record<string, string> = {}) {
  const dev = `${PCI}/${pci}`;
  return {
    [`sys/class/net/${name}`]: { link: `../../devices/pci0000:00/${pci}/net/${name}` },
    [`${dev}/net/${name}/address`]: `${mac}\n`,
    [`${dev}/net/${name}/carrier`]: '1\n',
    [`${dev}/net/${name}/type`]: `${extra.type ?? '1'}\n`,
    [`${dev}/net/${name}/speed`]: `${extra.speed ?? '10000'}\n`,
    [`${dev}/net/${name}/device`]: { link: `../../../${pci}` },
    [`${dev}/vendor`]: `${extra.vendor ?? '0x8086'}\n`,
    [`${dev}/device`]: `${extra.device ?? '0x1572'}\n`,
    [`${dev}/driver`]: { link: `../../../bus/pci/drivers/${extra.driver ?? 'i40e'}` },
  };
}

describe('built: a server with a bond, VLANs, IPoIB, SATA + NVMe disks, DMI and a BMC', () => {
  let dir: string;
  let inv: Inventory;
  const ipmiCalls: string[][] = [];
  beforeAll(async () => {
    const ib = '80:00:00:48:fe:80:00:00:00:00:00:00:24:8a:07:03:00:a1:b2:c3';
    dir = await buildTree({
      'proc/cpuinfo': [0, 1, 2, 3]
        .map(
          (i) =>
            `processor\t: ${i}\nmodel name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nphysical id\t: ${i >> 1}\ncpu MHz\t\t: 2000.000\nflags\t\t: fpu vmx sse4_2 aes pdpe1gb\n`,
        )
        .join('\n'),
      'proc/meminfo': 'MemTotal:       263856512 kB\n',
      'proc/sys/kernel/arch': 'x86_64\n',
      'proc/sys/kernel/hostname': 'compute-17\n',
      ...Object.fromEntries(
        [0, 1, 2, 3].flatMap((i) => [
          [`sys/devices/system/cpu/cpu${i}/topology/physical_package_id`, `${i >> 1}\n`],
          [`sys/devices/system/cpu/cpu${i}/cpufreq/cpuinfo_max_freq`, '3200000\n'],
        ]),
      ),
      'sys/class/dmi/id/sys_vendor': 'Dell Inc.\n',
      'sys/class/dmi/id/product_name': 'PowerEdge R650\n',
      'sys/class/dmi/id/product_sku': 'SKU=0A2B;ModelName=PowerEdge R650\n',
      'sys/class/dmi/id/product_serial': 'GX7Q2K3\n',
      'sys/class/dmi/id/bios_vendor': 'Dell Inc.\n',
      'sys/class/dmi/id/bios_version': '1.9.2\n',
      'sys/class/dmi/id/bios_date': '06/16/2023\n',
      ...Object.fromEntries(
        [0, 1, 2, 3].map((i) => [`sys/firmware/dmi/entries/17-${i}/raw`, smbiosMemoryDevice(65536)]),
      ),
      'sys/firmware/dmi/entries/17-4/raw': smbiosMemoryDevice(0),
      'sys/firmware/efi/systab': '',
      ...nic('eno1', '0000:18:00.0', '3c:fd:fe:00:00:01'),
      ...nic('eno2', '0000:18:00.1', '3c:fd:fe:00:00:01'),
      ...nic('ib0', '0000:3b:00.0', ib, {
        type: '32',
        vendor: '0x15b3',
        device: '0x101b',
        driver: 'mlx5_core',
        speed: '100000',
      }),
      ...nic('ens9', '0000:5e:00.0', 'fa:16:3e:00:00:09'),
      'sys/class/net/bond0': { link: '../../devices/virtual/net/bond0' },
      'sys/devices/virtual/net/bond0/address': '3c:fd:fe:00:00:01\n',
      'sys/devices/virtual/net/bond0/carrier': '1\n',
      'sys/devices/virtual/net/bond0/bonding/slaves': 'eno1 eno2\n',
      'sys/class/net/bond0.100': { link: '../../devices/virtual/net/bond0.100' },
      'sys/devices/virtual/net/bond0.100/address': '3c:fd:fe:00:00:01\n',
      'sys/devices/virtual/net/bond0.100/carrier': '1\n',
      'sys/class/net/br-ex': { link: '../../devices/virtual/net/br-ex' },
      'sys/devices/virtual/net/br-ex/address': '3c:fd:fe:00:00:77\n',
      'proc/net/bonding/bond0':
        'Bonding Mode: IEEE 802.3ad Dynamic link aggregation\n\nSlave Interface: eno1\nMII Status: up\nPermanent HW addr: 3c:fd:fe:00:00:01\n\nSlave Interface: eno2\nMII Status: up\nPermanent HW addr: 3C:FD:FE:00:00:02\n',
      'sys/block/sda': { link: '../devices/pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda' },
      [`${PCI}/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/block/sda/device`]: { link: '../../../2:0:0:0' },
      [`${PCI}/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/vendor`]: 'ATA     \n',
      [`${PCI}/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/wwid`]: 'naa.5002538e40a1b2c3\n',
      [`${PCI}/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0/scsi_device/2:0:0:0/.keep`]: '',
      // The kernel numbers ATA ports machine-wide (ata3); udev's by-path uses the port's number on its controller.
      [`${PCI}/0000:00:17.0/ata3/ata_port/ata3/port_no`]: '2\n',
      'sys/block/nvme0n1': { link: '../devices/pci0000:00/0000:65:00.0/nvme/nvme0/nvme0n1' },
      [`${PCI}/0000:65:00.0/nvme/nvme0/nvme0n1/wwid`]: 'eui.0025388a21b3c4d5\n',
      [`${PCI}/0000:65:00.0/nvme/nvme0/nvme0n1/nsid`]: '1\n',
      [`${PCI}/0000:65:00.0/nvme/nvme0/nvme0n1/device`]: { link: '../../nvme0' },
      [`${PCI}/0000:65:00.0/nvme/nvme0/serial`]: 'S4EVNF0M123456\n',
      'dev/ipmi0': '',
    });
    const lsblk = {
      blockdevices: [
        {
          kname: 'sda',
          path: '/dev/sda',
          size: 480103981056,
          model: 'SAMSUNG MZ7LH480',
          vendor: 'ATA     ',
          serial: 'S45PNA0M900001',
          wwn: '0x5002538e40a1b2c3',
          rota: false,
          hctl: '2:0:0:0',
          'log-sec': 512,
          'phy-sec': 4096,
          type: 'disk',
          tran: 'sata',
          ro: false,
        },
        {
          kname: 'nvme0n1',
          path: '/dev/nvme0n1',
          size: 3840755982336,
          model: 'Dell Ent NVMe P5600',
          vendor: null,
          serial: null,
          wwn: 'eui.0025388a21b3c4d5',
          rota: false,
          hctl: null,
          'log-sec': 512,
          'phy-sec': 512,
          type: 'disk',
          tran: 'nvme',
          ro: false,
        },
        {
          kname: 'sr0',
          path: '/dev/sr0',
          size: 1073741312,
          model: 'Virtual CD',
          vendor: null,
          serial: null,
          wwn: null,
          rota: true,
          hctl: '1:0:0:0',
          'log-sec': 2048,
          'phy-sec': 2048,
          type: 'rom',
          tran: 'usb',
          ro: true,
        },
      ],
    };
    inv = await collectInventory({
      root: new HostRoot(dir),
      lsblk: async () => JSON.stringify(lsblk),
      ipmitool: async (args) => {
        ipmiCalls.push(args);
        if (args[0] === 'lan' && args[2] === '1')
          return 'IP Address Source       : Static Address\nIP Address              : 10.20.0.17\nMAC Address             : D0:8E:79:00:11:22\n';
        if (args[0] === 'lan6' && args[3] === 'enables') return 'IPv6/IPv4 Support:  both\n';
        if (args[0] === 'lan6' && args[3] === 'dynamic_addr')
          return '    Dynamic Address 0:\n        Address: fd00:20::17/64\n        Status:  active\n';
        throw new Error('Invalid channel 2');
      },
      addresses: {
        'bond0.100': [
          { family: 'IPv4', address: '10.0.100.17', netmask: '255.255.255.0', mac: '', internal: false, cidr: null },
        ],
      },
      bootif: '01-3c-fd-fe-00-00-01',
      biosdevname: async (name) => ({ eno1: 'em1', eno2: 'em2' })[name] ?? null,
    });
  });
  afterAll(() => rm(dir, { recursive: true, force: true }));

  it('lists physical NICs, the bond and its VLAN; bond members by their permanent MAC; drops fa: and bridges', () => {
    expect(inv.interfaces.map((i) => [i.name, i.mac_address])).toEqual([
      ['bond0', '3c:fd:fe:00:00:01'],
      ['bond0.100', '3c:fd:fe:00:00:01'],
      ['eno1', '3c:fd:fe:00:00:01'],
      ['eno2', '3c:fd:fe:00:00:02'],
      ['ib0', '24:8a:07:a1:b2:c3'],
    ]);
    const eno2 = inv.interfaces.find((i) => i.name === 'eno2')!;
    expect(eno2).toMatchObject({
      vendor: '0x8086',
      product: '0x1572',
      speed_mbps: 10000,
      pci_address: '0000:18:00.1',
      driver: 'i40e',
      biosdevname: 'em2',
    });
    expect(inv.interfaces.find((i) => i.name === 'bond0.100')).toMatchObject({
      ipv4_address: '10.0.100.17',
      biosdevname: null,
      vendor: null,
    });
  });

  it('gives the IPoIB port its Mellanox client-id', () => {
    expect(inv.interfaces.find((i) => i.name === 'ib0')!.client_id).toBe(
      'ff:00:00:00:00:00:02:00:00:02:c9:00:24:8a:07:03:00:a1:b2:c3',
    );
    expect(infinibandIds('00:11')).toBeNull();
  });

  it('CPU: max frequency from cpufreq, sockets from the package ids', () => {
    expect(inv.cpu).toMatchObject({
      frequency: '3200.0000',
      count: 4,
      socket_count: 2,
      model_name: 'Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz',
    });
  });

  it('memory: physical_mb sums the SMBIOS memory devices (empty slot counts 0)', () => {
    expect(inv.memory).toEqual({ total: 263856512 * 1024, physical_mb: 4 * 65536 });
    expect(memoryDeviceMiB(smbiosMemoryDevice(40000))).toBe(40000);
    const kb = Buffer.from(smbiosMemoryDevice(0));
    kb.writeUInt16LE(0x8000 | 512, 0x0c);
    expect(memoryDeviceMiB(kb)).toBe(0.5);
  });

  it('disks: SATA with hctl, by-path and WWN; NVMe with its serial from sysfs; the CD-ROM left out', () => {
    expect(inv.disks.map((d) => d.name)).toEqual(['/dev/sda', '/dev/nvme0n1']);
    expect(inv.disks[0]).toMatchObject({
      hctl: '2:0:0:0',
      by_path: '/dev/disk/by-path/pci-0000:00:17.0-ata-2.0',
      tran: 'sata',
      vendor: 'ATA',
      wwn: '0x5002538e40a1b2c3',
      rotational: false,
      physical_sectors: 4096,
    });
    expect(inv.disks[1]).toMatchObject({
      serial: 'S4EVNF0M123456',
      by_path: '/dev/disk/by-path/pci-0000:65:00.0-nvme-1',
      tran: 'nvme',
      hctl: null,
    });
    expect(guessRootDisk(inv.disks)?.name).toBe('/dev/sda');
  });

  it('DMI vendor and firmware, UEFI boot, raw BOOTIF, BMC addresses and MAC', () => {
    expect(inv.system_vendor).toEqual({
      product_name: 'PowerEdge R650 (SKU=0A2B;ModelName=PowerEdge R650)',
      serial_number: 'GX7Q2K3',
      manufacturer: 'Dell Inc.',
      firmware: { vendor: 'Dell Inc.', version: '1.9.2', build_date: '06/16/2023' },
    });
    expect(inv.boot).toEqual({ current_boot_mode: 'uefi', pxe_interface: '01-3c-fd-fe-00-00-01' });
    expect(inv).toMatchObject({
      bmc_address: '10.20.0.17',
      bmc_v6address: 'fd00:20::17',
      bmc_mac: 'd0:8e:79:00:11:22',
      hostname: 'compute-17',
    });
    expect(ipmiCalls[0]).toEqual(['lan', 'print', '1']);
  });
});

describe('built: a laptop (Wi-Fi without a PCI vendor file, USB devices, no BMC, one NVMe)', () => {
  let dir: string;
  afterAll(() => rm(dir, { recursive: true, force: true }));
  it('reads the USB devices but not the hubs, and the Wi-Fi NIC', async () => {
    dir = await buildTree({
      'proc/cpuinfo':
        'processor\t: 0\nmodel name\t: 11th Gen Intel(R) Core(TM) i7-1165G7 @ 2.80GHz\ncpu MHz\t\t: 1690.796\nflags\t\t: fpu sse4_2\n',
      'proc/meminfo': 'MemTotal:       16131000 kB\n',
      ...nic('wlp0s20f3', '0000:00:14.3', '8c:c6:81:aa:bb:cc', {
        driver: 'iwlwifi',
        vendor: '0x8086',
        device: '0xa0f0',
        speed: '-1',
      }),
      'sys/bus/usb/devices/1-0:1.0/bInterfaceClass': '09\n',
      'sys/bus/usb/devices/usb1/busnum': '1\n',
      'sys/bus/usb/devices/usb1/devnum': '1\n',
      'sys/bus/usb/devices/usb1/bDeviceClass': '09\n',
      'sys/bus/usb/devices/1-3/busnum': '1\n',
      'sys/bus/usb/devices/1-3/devnum': '4\n',
      'sys/bus/usb/devices/1-3/bDeviceClass': 'ef\n',
      'sys/bus/usb/devices/1-3/product': 'Integrated_Webcam_HD\n',
      'sys/bus/usb/devices/1-3/manufacturer': 'CN09GTFMLOG0089ABE2JA00\n',
    });
    const root = new HostRoot(dir);
    expect(await readUsbDevices(root)).toEqual([
      { product: 'Integrated_Webcam_HD', vendor: 'CN09GTFMLOG0089ABE2JA00', handle: 'USB:1:4' },
    ]);
    const inv = await collectInventory({
      root,
      lsblk: async () => '{"blockdevices":[]}',
      ipmitool: noIpmi,
      addresses: {},
    });
    expect(inv.interfaces[0]).toMatchObject({ name: 'wlp0s20f3', speed_mbps: null, driver: 'iwlwifi' });
    expect(inv.cpu).toMatchObject({ frequency: '1690.7960', socket_count: 1, architecture: '' });
    expect(inv.memory.physical_mb).toBeNull();
  });
});

describe('cpu.count', () => {
  it("counts the CPUs present, as lscpu's CPU(s) does, not only the online ones /proc/cpuinfo lists (nosmt)", async () => {
    const block = (n: number) => `processor\t: ${n}\nmodel name\t: Xeon\nflags\t\t: fpu sse2\n\n`;
    const dir = await buildTree({
      'proc/cpuinfo': block(0) + block(1),
      'sys/devices/system/cpu/present': '0-3,6-7\n',
      'sys/devices/system/cpu/online': '0-1\n',
    });
    try {
      expect((await readCpu(new HostRoot(dir))).count).toBe(6);
      await rm(join(dir, 'sys/devices/system/cpu/present'));
      expect((await readCpu(new HostRoot(dir))).count).toBe(2);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});

describe('dmidecode and CPU lists', () => {
  it('groups BIOS, processors and memory devices with dmidecode labels', () => {
    const text = [
      '# dmidecode 3.6',
      'Handle 0x0000, DMI type 0, 26 bytes',
      'BIOS Information',
      '\tVendor: SeaBIOS',
      '\tVersion: 1.16.3',
      '\tCharacteristics:',
      '\t\tBIOS characteristics not supported',
      '\t\tTargeted content distribution is supported',
      '',
      'Handle 0x0400, DMI type 4, 48 bytes',
      'Processor Information',
      '\tSocket Designation: CPU 0',
      '\tCore Count: 2',
      '',
      'Handle 0x1000, DMI type 16, 23 bytes',
      'Physical Memory Array',
      '\tMaximum Capacity: 2 GB',
      '\tNumber Of Devices: 1',
      '',
      'Handle 0x1100, DMI type 17, 40 bytes',
      'Memory Device',
      '\tSize: 2 GB',
      '\tLocator: DIMM 0',
      '',
    ].join('\n');
    expect(groupDmi(parseDmidecode(text))).toEqual({
      bios: {
        Vendor: 'SeaBIOS',
        Version: '1.16.3',
        Characteristics: ['BIOS characteristics not supported', 'Targeted content distribution is supported'],
      },
      cpu: [{ 'Socket Designation': 'CPU 0', 'Core Count': '2' }],
      memory: { 'Maximum Capacity': '2 GB', 'Number Of Devices': 1, devices: [{ Size: '2 GB', Locator: 'DIMM 0' }] },
    });
    expect(parseCpuList('0-2,8,10-11')).toEqual([0, 1, 2, 8, 10, 11]);
  });
});
