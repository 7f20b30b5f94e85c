// The switch port at the far end of a VM NIC's UDP wire (vm.ts `wireNics`, `bootWire`): QEMU's
// `-netdev socket,udp=` takes frames for the guest on one loopback port and sends the guest's to another. The
// switch repeats its LLDP frame every 200 ms (a real one every 30 s), so the agent's listening window, whenever
// it opens, sees one; the guest's frames land on a socket nobody reads.
import { createSocket, type Socket } from 'node:dgram';
import type { AddressInfo } from 'node:net';
import type { WireEnds } from './vm.ts';

export interface SwitchWire extends WireEnds {
  /** Stops sending and closes the sockets. */
  close(): void;
}

async function udp(): Promise<Socket> {
  const s = createSocket('udp4');
  await new Promise<void>((resolve, reject) => s.once('error', reject).bind(0, '127.0.0.1', resolve));
  return s;
}

const portOf = (s: Socket) => (s.address() as AddressInfo).port;

export async function switchWire(frame: Buffer): Promise<SwitchWire> {
  const fromGuest = await udp();
  // QEMU binds the guest's receiving port itself: a free one, taken from a socket closed just before
  const probe = await udp();
  const hostToGuestPort = portOf(probe);
  probe.close();
  const switchPort = await udp();
  const sender = setInterval(() => switchPort.send(frame, hostToGuestPort, '127.0.0.1'), 200);
  return {
    hostToGuestPort,
    guestToHostPort: portOf(fromGuest),
    close: () => {
      clearInterval(sender);
      fromGuest.close();
      switchPort.close();
    },
  };
}
