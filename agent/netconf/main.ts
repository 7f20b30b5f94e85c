// Applies a network_data.json (network-data.ts) to this machine's NICs: /init runs it on a virtual-media boot,
// before DHCP, and starts no DHCP client on the NICs it names on stdout. Flags: --network-data (the file),
// --sys-class-net (default /sys/class/net) and --resolv-conf (default /etc/resolv.conf), the last two so that
// the tests can run it inside a network namespace of their own. Exits 1 with one line on stderr when the file
// is malformed or a command fails; /init then falls back to DHCP everywhere.
import { readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { execa } from 'execa';
import { parseFlags } from '../config/sources.ts';
import { parseNetworkData, planNetwork } from './network-data.ts';

function nics(sysClassNet: string): Map<string, string> {
  const out = new Map<string, string>();
  for (const name of readdirSync(sysClassNet)) {
    if (name === 'lo') continue;
    try {
      out.set(name, readFileSync(join(sysClassNet, name, 'address'), 'utf8').trim());
    } catch {
      // A NIC that went away while listed.
    }
  }
  return out;
}

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2));
  const file = flags.get('network-data') ?? '/run/ina/network_data.json';
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`network_data.json: cannot read ${file}: ${(err as Error).message}`);
  }
  const plan = planNetwork(parseNetworkData(json), nics(flags.get('sys-class-net') ?? '/sys/class/net'));
  for (const why of plan.skipped) process.stderr.write(`network_data.json: ${why}\n`);
  const kinds = new Set(
    plan.commands.filter((c) => c[1] === 'add' && c.includes('type')).map((c) => c.at(c.indexOf('type') + 1)),
  );
  if (kinds.has('bond')) await execa('modprobe', ['-q', 'bonding'], { reject: false });
  if (kinds.has('vlan')) await execa('modprobe', ['-q', '8021q'], { reject: false });
  for (const args of plan.commands) {
    const r = await execa('ip', args, { reject: false });
    if (r.exitCode !== 0)
      throw new Error(`network_data.json: ip ${args.join(' ')}: ${(r.stderr || `exit ${r.exitCode}`).trim()}`);
  }
  if (plan.nameservers.length > 0) {
    writeFileSync(
      flags.get('resolv-conf') ?? '/etc/resolv.conf',
      plan.nameservers.map((a) => `nameserver ${a}\n`).join(''),
    );
  }
  for (const name of plan.configured) process.stdout.write(`${name}\n`);
}

main().catch((err: Error) => {
  process.stderr.write(`${err.message}\n`);
  process.exit(1);
});
