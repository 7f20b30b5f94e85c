// Run inside a test's network namespace (`ip netns exec NS node --import tsx netns-vlans.ts JSON`): the agent's
// VLAN step over the named interfaces with the real LLDP helper, then the inventory's interfaces as the agent
// reads them from that namespace's /sys/class/net. Prints `RESULT {made, interfaces, frames}` after the log lines.
import { readFileSync } from 'node:fs';
import { liveRoot } from '../../agent/inspect/host-root.ts';
import { readInterfaces } from '../../agent/inspect/interfaces.ts';
import { captureLldp } from '../../agent/inspect/lldp-capture.ts';
import { enableVlanInterfaces } from '../../agent/inspect/vlans.ts';
import { createLogger } from '../../agent/log.ts';

const args = JSON.parse(process.argv[2]!) as { entries: string[]; collectLldp: boolean; nics: string[] };
const { log } = createLogger({ debug: false });
// One listening window serves both the VLAN step and the inventory (the silent NICs cost the whole window).
const frames = (await captureLldp(args.nics, { timeoutS: 5 })).frames;
const made = await enableVlanInterfaces({
  entries: args.entries,
  collectLldp: args.collectLldp,
  lldpTimeoutS: 5,
  log,
  // The veths (not NICs to IPA, having no device) and what the inventory lists already (VLANs of an earlier run).
  nics: async () => [
    ...args.nics.map((name) => ({
      name,
      mac_address: readFileSync(`/sys/class/net/${name}/address`, 'utf8').trim(),
    })),
    ...(await readInterfaces(liveRoot, { addresses: {} })),
  ],
  capture: async (names) => ({ frames: Object.fromEntries(names.map((n) => [n, frames[n] ?? []])) }),
});
const interfaces = await readInterfaces(liveRoot, { addresses: {}, lldp: frames });
process.stdout.write(`RESULT ${JSON.stringify({ made, interfaces, frames })}\n`);
