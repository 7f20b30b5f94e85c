// `usb_devices`: the USB devices other than hubs, as lshw names them (product, vendor, `USB:<bus>:<dev>`).
import type { HostRoot } from '../host-root.ts';

export interface UsbDevice {
  product: string | null;
  vendor: string | null;
  handle: string;
}

const HUB_CLASS = '09';

export async function readUsbDevices(root: HostRoot): Promise<UsbDevice[]> {
  const out: UsbDevice[] = [];
  for (const dev of await root.list('/sys/bus/usb/devices')) {
    if (dev.includes(':')) continue; // interfaces, not devices
    const base = `/sys/bus/usb/devices/${dev}`;
    const bus = await root.read(`${base}/busnum`);
    const num = await root.read(`${base}/devnum`);
    if (bus === null || num === null || (await root.read(`${base}/bDeviceClass`)) === HUB_CLASS) continue;
    out.push({
      product: await root.read(`${base}/product`),
      vendor: await root.read(`${base}/manufacturer`),
      handle: `USB:${bus}:${num}`,
    });
  }
  return out;
}
