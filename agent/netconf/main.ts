// Applies a network_data.json (network-data.ts) to this machine's NICs: /init runs it on a virtual-media boot,
// before DHCP, and starts no DHCP client on the devices it names on stdout. Flags: --network-data (the file),
// --sys-class-net (default /sys/class/net) and --resolv-conf (default /etc/resolv.conf), the last two so that
// the tests can run it inside a network namespace of their own. Exits 1 with one line on stderr when the file
// is malformed or a step fails, after undoing what it made; /init then falls back to DHCP everywhere.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseFlags } from '../config/sources.ts';
import { run } from '../exec.ts';
import { listSys, readSys } from '../host/sysfs.ts';
import { type NetworkData, parseNetworkData, planNetwork, type Plan } from './network-data.ts';

/** How long the NICs the document names may take to appear: drivers such as mlx5 and ice register late. */
const NIC_WAIT_MS = 15_000;

async function nics(sysClassNet: string): Promise<Map<string, string>> {
  const out = new Map<string, string>();
  for (const name of await listSys(sysClassNet)) {
    const mac = name === 'lo' ? null : await readSys(join(sysClassNet, name, 'address'));
    if (mac) out.set(name, mac);
  }
  return out;
}

async function nicsNamedBy(data: NetworkData, sysClassNet: string): Promise<Map<string, string>> {
  const wanted = data.links.filter((l) => l.type !== 'bond' && l.type !== 'vlan').map((l) => l.mac!);
  const deadline = Date.now() + NIC_WAIT_MS;
  for (;;) {
    const found = await nics(sysClassNet);
    const macs = new Set([...found.values()].map((m) => m.toLowerCase()));
    if (wanted.every((m) => macs.has(m)) || Date.now() > deadline) return found;
    await sleep(250);
  }
}

/** A module the plan needs; one built into the kernel, or missing, is left to the `ip` steps to report. */
async function loadModule(args: string[]): Promise<void> {
  await run('modprobe', ['-q', ...args]).catch(() => undefined);
}

async function apply(plan: Plan, sysClassNet: string): Promise<void> {
  if (plan.steps.some((s) => 'sysfs' in s)) await loadModule(['bonding', 'max_bonds=0']);
  if (plan.created.some((name) => name.includes('.'))) await loadModule(['8021q']);
  for (const step of plan.steps) {
    if ('ip' in step) await run('ip', step.ip);
    else {
      try {
        writeFileSync(join(sysClassNet, step.sysfs), step.value);
      } catch (err) {
        throw new Error(`writing ${step.value} to ${step.sysfs}: ${(err as Error).message}`);
      }
    }
  }
}

/** What a failed plan leaves is taken away, so that DHCP starts from clean NICs. */
async function undo(plan: Plan): Promise<void> {
  for (const name of [...plan.created].reverse()) await run('ip', ['link', 'del', name]).catch(() => undefined);
  for (const name of plan.configured) await run('ip', ['addr', 'flush', 'dev', name]).catch(() => undefined);
}

async function main(): Promise<void> {
  const flags = parseFlags(process.argv.slice(2));
  const file = flags.get('network-data') ?? '/run/ina/network_data.json';
  const sysClassNet = flags.get('sys-class-net') ?? '/sys/class/net';
  let json: unknown;
  try {
    json = JSON.parse(readFileSync(file, 'utf8'));
  } catch (err) {
    throw new Error(`cannot read ${file}: ${(err as Error).message}`);
  }
  const data = parseNetworkData(json);
  const plan = planNetwork(data, await nicsNamedBy(data, sysClassNet));
  for (const why of plan.skipped) process.stderr.write(`network_data.json: ${why}\n`);
  try {
    await apply(plan, sysClassNet);
  } catch (err) {
    await undo(plan);
    throw err;
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
  process.stderr.write(`network_data.json: ${err.message.replace(/^network_data\.json: /, '')}\n`);
  process.exit(1);
});
