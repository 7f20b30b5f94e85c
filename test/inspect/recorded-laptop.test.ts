// The inventory of a laptop-like machine's tree: test/fixtures/inspect/laptop-like-qemu, recorded by
// scripts/inspect/record-in-vm.ts --profile laptop from the project's ramdisk (Debian's kernel) in QEMU. It is
// QEMU with laptop-like devices, not a laptop: booted through OVMF, Wi-Fi from the kernel's mac80211_hwsim (a
// real mac80211 driver: wlan0 with wireless/ and phy80211), one e1000e NIC, a USB keyboard, tablet and storage
// stick on xHCI (the stick carried the tree out, so it is recorded blank), one NVMe disk, notebook-like SMBIOS
// strings (QEMU 7.2 cannot set the chassis type: it stays 1, "Other"), no IPMI.
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { runCollectors, type Payload } from '../../agent/inspect/collectors/registry.ts';
import { HostRoot } from '../../agent/inspect/host-root.ts';
import { collectInventory, guessRootDisk, inventorySummary, type Inventory } from '../../agent/inspect/inventory.ts';
import { LogRing, nullLogger } from '../../agent/log.ts';

const dir = join(import.meta.dirname, '..', 'fixtures/inspect/laptop-like-qemu');
const root = new HostRoot(dir);

describe('recorded: a laptop-like machine (Debian kernel in QEMU under OVMF, mac80211_hwsim Wi-Fi, USB)', () => {
  let data: Payload;
  let inv: Inventory;
  beforeAll(async () => {
    const result = await runCollectors({
      root,
      log: nullLogger,
      logRing: new LogRing(),
      names: ['default', 'usb-devices'],
      captureLldp: async () => {
        throw new Error('no LLDP capture in this test');
      },
      waitForDhcp: async () => {},
      run: async (file) => {
        throw new Error(`${file} must not run in this test`);
      },
      inventory: () =>
        collectInventory({
          root,
          lsblk: async () => readFileSync(join(dir, 'lsblk.json'), 'utf8'),
          ipmitool: async () => {
            throw new Error('ipmitool must not run without /dev/ipmi*');
          },
          addresses: JSON.parse(readFileSync(join(dir, 'addresses.json'), 'utf8')),
        }),
    });
    expect(result.failures).toEqual([]);
    data = result.data;
    inv = data.inventory as Inventory;
  });

  it('the recording is what the kernel shows for a Wi-Fi NIC: wireless/ and a link to its radio', async () => {
    expect(await root.exists('/sys/class/net/wlan0/wireless')).toBe(true);
    expect(await root.linkName('/sys/class/net/wlan0/phy80211')).toBe('phy0');
    expect(await root.exists('/sys/class/net/eth0/wireless')).toBe(false);
    // hwsim0 is the simulator's monitor netdev: no device link, so IPA does not list it.
    expect(await root.exists('/sys/class/net/hwsim0')).toBe(true);
  });

  it('lists the wired NIC and wlan0 as IPA reports them; the radio is no PCI device', () => {
    expect(inv.interfaces).toEqual([
      {
        name: 'eth0',
        mac_address: '52:54:00:1a:70:01',
        ipv4_address: '192.0.2.14',
        ipv6_address: '2001:db8:14::14',
        has_carrier: true,
        lldp: null,
        vendor: '0x8086',
        product: '0x10d3',
        client_id: null,
        biosdevname: null,
        speed_mbps: 1000,
        pci_address: '0000:00:04.0',
        driver: 'e1000e',
      },
      {
        name: 'wlan0',
        mac_address: '02:00:00:00:00:00',
        ipv4_address: null,
        ipv6_address: null,
        has_carrier: false,
        lldp: null,
        vendor: null,
        product: null,
        client_id: null,
        biosdevname: null,
        speed_mbps: null,
        // IPA takes the basename of the device link, whatever bus it is on.
        pci_address: 'hwsim0',
        driver: 'mac80211_hwsim',
      },
    ]);
  });

  it('lookup sends both MACs, the Wi-Fi one included', async () => {
    expect(await nicMacs(root)).toEqual(['52:54:00:1a:70:01', '02:00:00:00:00:00']);
  });

  it('usb_devices: the keyboard, tablet and stick on xHCI, root hubs left out', () => {
    expect(data.usb_devices).toEqual([
      { product: 'QEMU USB Keyboard', vendor: 'QEMU', handle: 'USB:1:2' },
      { product: 'QEMU USB Tablet', vendor: 'QEMU', handle: 'USB:1:3' },
      { product: 'QEMU USB HARDDRIVE', vendor: 'QEMU', handle: 'USB:2:2' },
    ]);
  });

  it('booted through UEFI; system_vendor from the SMBIOS strings, firmware from OVMF; no BMC', async () => {
    expect(inv.boot).toEqual({ current_boot_mode: 'uefi', pxe_interface: null });
    expect(inv.system_vendor).toEqual({
      // lshw's form, as in IPA's inventory: the SKU (L14-QEMU) in parentheses after the product.
      product_name: 'Laptop-like L14 (QEMU) (L14-QEMU)',
      serial_number: 'REC-LAPTOP-0001',
      manufacturer: 'INA Recorded Notebooks',
      firmware: { vendor: 'EFI Development Kit II / OVMF', version: '0.0.0', build_date: '02/06/2015' },
    });
    expect(await root.read('/sys/class/dmi/id/chassis_vendor')).toBe('INA Recorded Notebooks');
    expect(await root.read('/sys/class/dmi/id/chassis_type')).toBe('1');
    // No /dev/ipmi*: IPA's null (its "0.0.0.0" is for an IPMI device whose channels have no address).
    expect((await root.list('/dev')).filter((d) => d.startsWith('ipmi'))).toEqual([]);
    expect(inv.bmc_address).toBeNull();
    expect(inv.bmc_v6address).toBeNull();
    expect(inv).not.toHaveProperty('bmc_mac');
    expect(inv.hostname).toBe('rec-laptop');
  });

  it('disks: the NVMe with its serial is the root disk; the USB stick is listed with tran usb', () => {
    expect(inv.disks.map((d) => [d.name, d.size, d.serial, d.tran, d.rotational])).toEqual([
      ['/dev/sda', 67108864, null, 'usb', true],
      ['/dev/nvme0n1', 17179869184, 'RECLAPNVME01', 'nvme', false],
    ]);
    expect(inv.disks.find((d) => d.name === '/dev/nvme0n1')).toMatchObject({
      model: 'QEMU NVMe Ctrl',
      by_path: '/dev/disk/by-path/pci-0000:00:03.0-nvme-1',
    });
    expect(guessRootDisk(inv.disks)?.name).toBe('/dev/nvme0n1');
    expect(data.root_disk).toMatchObject({ name: '/dev/nvme0n1', serial: 'RECLAPNVME01' });
    expect(inv.memory.physical_mb).toBe(1536);
    expect(inv.cpu).toMatchObject({ count: 2, architecture: 'x86_64', socket_count: 1 });
    expect(inventorySummary(inv)).toBe(
      '2 CPU x86_64, 1536 MiB, 2 disks, 2 NICs, INA Recorded Notebooks Laptop-like L14 (QEMU) (L14-QEMU)',
    );
  });
});
