// Ironic 39 (Debian sid) inspects the built ramdisk under QEMU with its LLDP hooks on (`parse-lldp`,
// `local-link-connection`), against what real switch ports sent on the wire:
// - the boot NIC is cabled to a leaf (QEMU hub: user-mode networking, which carries lookup, inspection and
//   heartbeats, plus a UDP wire the test plays the leaf on); a second NIC on a wire of its own hears another leaf;
// - both NICs are the node's ports; the ramdisk boots with `ipa-api-url` and `ipa-collect-lldp=1` (what Ironic
//   passes with `[inspector]force_dhcp`), inspects, posts to /v1/continue_inspection, looks up and heartbeats;
// - each port's local_link_connection (switch_id, port_id, switch_info) and plugin data `parsed_lldp` must be
//   exactly what that NIC's switch sent.
import { writeFile, truncate } from 'node:fs/promises';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { switchFrame } from '../helpers/lldp-frames.ts';
import { workDir } from '../helpers/make-image.ts';
import { ensureSidChroot, sidUnavailable, startIronicForVm, type IronicForVm } from './ironic-vm.ts';
import { switchWire, type SwitchWire } from './switch-wire.ts';
import { OUT, startVm, until, type Vm } from './vm.ts';

const MACS = { boot: '52:54:00:2e:00:01', wire: '52:54:00:2e:00:02' };
// One switch per NIC, each port named and announcing one VLAN (lldp-frames.ts adds the rest of a leaf's TLVs).
const SWITCHES = {
  boot: { src: '0c:42:a1:5e:77:10', port: 'Ethernet7', system: 'leaf-07.rack3', vlan: 142 },
  wire: { src: '0c:42:a1:5e:88:20', port: 'Ethernet31', system: 'leaf-08.rack3', vlan: 143 },
};
const EXTRA_CONF = `
[DEFAULT]
default_inspect_interface = agent
[inspector]
hooks = $default_hooks,parse-lldp,local-link-connection
# fake boot cannot boot a ramdisk: inspection is unmanaged, and the test boots the VM
require_managed_boot = false
`;

const why = sidUnavailable();
if (why) console.warn(`lldp-ironic.test.ts skipped: ${why}`);

function report(line: string): void {
  process.stdout.write(`[e2e] ${line}\n`);
}

/** `work`'s result, or a failure with the console's tail as soon as the VM exits first. */
function unlessVmDies<T>(vm: Vm, work: Promise<T>, what: string): Promise<T> {
  const died = vm.exited.then((code): never => {
    throw new Error(
      `the VM exited (code ${code}) before ${what}; its console ended with:\n${vm.serial().slice(-4000)}`,
    );
  });
  return Promise.race([work, died]);
}

/** Every step in order, each whatever the others did; then fails with what failed. */
async function cleanUp(steps: (() => unknown)[]): Promise<void> {
  const failures: unknown[] = [];
  for (const step of steps) {
    try {
      await step();
    } catch (err) {
      failures.push(err);
    }
  }
  if (failures.length > 0) throw new AggregateError(failures, `${failures.length} cleanup step(s) failed`);
}

let work: Awaited<ReturnType<typeof workDir>>;
let rig: IronicForVm | undefined;
const wires: SwitchWire[] = [];

beforeAll(async () => {
  if (why) return;
  work = await workDir('ina-e2e-lldp-ironic-');
  await ensureSidChroot();
  const t0 = Date.now();
  rig = await startIronicForVm({ extraConf: EXTRA_CONF });
  report(`sid Ironic up in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
}, 1_500_000);

afterAll(async () => {
  const vm = rig?.vm;
  await cleanUp([
    async () => vm?.kill(),
    async () => vm && writeFile(join(OUT, 'e2e-serial-lldp-ironic.log'), vm.serial()),
    ...wires.map((w) => () => w.close()),
    async () => rig?.stop(),
    async () => work?.cleanup(),
  ]);
});

describe.skipIf(why)('Ironic 39 inspection with the LLDP hooks, the ramdisk in QEMU', () => {
  let uuid: string | undefined;

  it("fills each port's local_link_connection and parsed_lldp from what its switch sent", async () => {
    const r = rig!;
    const id = await r.enroll({ name: 'ina-lldp', driver: 'fake-hardware', inspect_interface: 'agent' }, [
      { address: MACS.boot },
      { address: MACS.wire },
    ]);
    uuid = id;
    await r.bm.run(['node', 'manage', id]);
    await r.waitForState(id, 'manageable');
    await r.bm.run(['node', 'inspect', id]);
    // unmanaged inspection: "inspect wait" at once, waiting for the ramdisk's callback
    await until('"inspect wait"', async () => (await r.bm.node(id)).provision_state === 'inspect wait', 60_000, 500);

    const frames = { boot: switchFrame(SWITCHES.boot), wire: switchFrame(SWITCHES.wire) };
    const bootWire = await switchWire(frames.boot.frame);
    wires.push(bootWire);
    const nicWire = await switchWire(frames.wire.frame);
    wires.push(nicWire);
    const vda = join(work.dir, 'vda.img');
    await writeFile(vda, '');
    await truncate(vda, 64 * 1024 * 1024);
    r.vm = await startVm({
      disk: vda,
      serialLog: join(work.dir, 'serial.log'),
      mac: MACS.boot,
      bootWire,
      wireNics: [{ mac: MACS.wire, ...nicWire }],
      forwards: r.forwards,
      append: (agentPort) =>
        `${r.kernelArgs(agentPort)} ipa-inspection-callback-url=${r.apiUrlInGuest}/v1/continue_inspection ` +
        `BOOTIF=01-${MACS.boot.replaceAll(':', '-')} ipa-collect-lldp=1 ipa-lldp-timeout=20`,
    });

    const vm = r.vm;
    const node = await unlessVmDies(vm, r.waitForState(id, 'manageable', 600_000), 'inspection ended');
    expect(node.last_error).toBeNull();
    report(`QEMU start -> manageable: ${((Date.now() - r.vm.startedAt) / 1000).toFixed(1)} s (${r.vm.accel})`);

    const { ports } = await r.get<{ ports: { address: string; local_link_connection: Record<string, string> }[] }>(
      `/v1/ports?node=${id}&fields=address,local_link_connection`,
    );
    const llc = Object.fromEntries(ports.map((p) => [p.address, p.local_link_connection]));
    for (const nic of ['boot', 'wire'] as const) {
      const s = SWITCHES[nic];
      // switch_id from the chassis ID (a MAC), port_id from the port ID, switch_info from the system name
      expect(llc[MACS[nic]]).toEqual({ switch_id: s.src, port_id: s.port, switch_info: s.system });
    }

    const stored = await r.get<{ inventory: Record<string, any>; plugin_data: Record<string, any> }>(
      `/v1/nodes/${id}/inventory`,
    );
    // the TLVs came in each interface's `lldp` (ipa-collect-lldp), not from the `lldp` collector
    expect(stored.plugin_data.lldp_raw).toBeUndefined();
    for (const nic of ['boot', 'wire'] as const) {
      const s = SWITCHES[nic];
      const iface = stored.inventory.interfaces.find((i: any) => i.mac_address === MACS[nic]);
      // every TLV switchFrame() built, hex-encoded as IPA does
      expect(iface.lldp).toEqual(frames[nic].tlvs);
      // Ironic's reading of every TLV switchFrame() builds, nothing more
      expect(stored.plugin_data.parsed_lldp[iface.name]).toEqual({
        switch_chassis_id: s.src,
        switch_port_id: s.port,
        switch_port_description: `to server-17 ${s.port}`,
        switch_system_name: s.system,
        switch_system_description: 'Arista Networks EOS version 4.30.1F',
        // capabilities 0x0014 supported and enabled: bits 2 and 4
        switch_capabilities_support: ['Bridge', 'Router'],
        switch_capabilities_enabled: ['Bridge', 'Router'],
        switch_mgmt_addresses: ['10.0.0.2'],
        // 802.1: port VLAN id and VLAN name
        switch_port_untagged_vlan_id: s.vlan,
        switch_port_vlans: [{ id: s.vlan, name: `vlan${s.vlan}` }],
        // 802.3 MAC/PHY: autonegotiation supported and on (0x03), PMD 0x6c00, MAU type 30
        switch_port_autonegotiation_enabled: true,
        switch_port_autonegotiation_support: true,
        switch_port_physical_capabilities: ['100BASE-TX fdx', '100BASE-TX hdx', '10BASE-T fdx', '10BASE-T hdx'],
        switch_port_mau_type: '1000BASE-T full duplex',
      });
    }
  }, 900_000);

  it('the agent that inspected looks up and heartbeats (fast track)', async (t) => {
    if (!uuid || !rig?.vm) {
      const note = 'the inspection test enrolled no node or started no VM';
      console.warn(`lldp-ironic.test.ts heartbeat test skipped: ${note}`);
      t.skip(note);
    }
    const t0 = Date.now();
    const node = await unlessVmDies(rig!.vm!, rig!.heartbeated(uuid!), 'its first heartbeat');
    report(`first heartbeat ${((Date.now() - t0) / 1000).toFixed(1)} s after manageable`);
    expect(node.driver_internal_info.agent_url).toBe(`https://127.0.0.1:${rig!.vm!.agentPort}`);
  }, 300_000);
});
