// The machine's network interfaces as lookup needs them: the MACs of physical NICs, read from sysfs.
// `lo` and virtual devices (no `device` link: bridges, bonds, veth, ifb, tun) are skipped.
import { access, readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '../clock.ts';

const MAC = /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/;
const SYS_NET = '/sys/class/net';

/** Lower-case MACs of the physical NICs, in interface-name order. */
export async function nicMacs(dir = SYS_NET): Promise<string[]> {
  const names = (await readdir(dir)).sort();
  const macs: string[] = [];
  for (const name of names) {
    if (name === 'lo') continue;
    try {
      await access(join(dir, name, 'device'));
    } catch {
      continue;
    }
    const mac = (await readFile(join(dir, name, 'address'), 'utf8').catch(() => '')).trim().toLowerCase();
    if (MAC.test(mac) && mac !== '00:00:00:00:00:00' && !macs.includes(mac)) macs.push(mac);
  }
  return macs;
}

/** Polls until a NIC with a MAC shows up (drivers may still be loading), for at most `timeoutS`. */
export async function waitForNicMacs(timeoutS: number, clock: Clock, signal?: AbortSignal, read: () => Promise<string[]> = nicMacs): Promise<string[]> {
  const deadline = clock.now() + timeoutS * 1000;
  for (;;) {
    const macs = await read();
    const left = deadline - clock.now();
    if (macs.length > 0 || left <= 0 || signal?.aborted) return macs;
    await clock.sleep(Math.min(1000, left), signal);
  }
}
