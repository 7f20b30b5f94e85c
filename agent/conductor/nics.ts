// The MACs lookup sends: every interface the inventory lists (physical NICs, bonds, VLAN interfaces,
// InfiniBand ports by the MAC Ironic derives from their GUID), as IPA sends its inventory's MACs.
import type { Clock } from '../clock.ts';
import { liveRoot, type HostRoot } from '../inspect/host-root.ts';
import { readInterfaces } from '../inspect/interfaces.ts';

/** Lower-case MACs in interface-name order, each once. */
export async function nicMacs(root: HostRoot = liveRoot): Promise<string[]> {
  const macs: string[] = [];
  for (const i of await readInterfaces(root, { addresses: {} }))
    if (!macs.includes(i.mac_address)) macs.push(i.mac_address);
  return macs;
}

/** Polls until a NIC with a MAC shows up (drivers may still be loading), for at most `timeoutS`. */
export async function waitForNicMacs(
  timeoutS: number,
  clock: Clock,
  signal?: AbortSignal,
  read: () => Promise<string[]> = nicMacs,
): Promise<string[]> {
  const deadline = clock.now() + timeoutS * 1000;
  for (;;) {
    const macs = await read();
    const left = deadline - clock.now();
    if (macs.length > 0 || left <= 0 || signal?.aborted) return macs;
    await clock.sleep(Math.min(1000, left), signal);
  }
}
