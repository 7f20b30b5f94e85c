// The whole loop for real: Ironic 21.4 (ipmi, ipxe, direct, automated cleaning) powers a QEMU machine
// through the BMC in bmc.py, network-boots our ramdisk, the agent cleans, writes a Debian cloud image
// (compressed qcow2, sha256) and the config drive Ironic built from JSON; the instance boots from its
// disk and its cloud-init configures itself from that config drive; undeploy cleans again and leaves
// the node available and powered off. UEFI first (OVMF, a per-run VARS copy), then SeaBIOS.
// Runs only inside scripts/fullloop/run.sh's network namespace.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatPhases, type Phase } from './phase-table.ts';
import { BMC_PORT, HOST, HTTP_PORT, MAC, startRig, type Firmware } from './rig.ts';

const firmwares = (process.env.FULLLOOP_FIRMWARES ?? 'uefi bios').split(/[\s,]+/).filter(Boolean) as Firmware[];
const image = process.env.FULLLOOP_IMAGE;
const phases: Phase[] = [];
const STATIC_IP = '10.0.2.50';

afterAll(() => {
  if (phases.length === 0) return;
  const table = formatPhases(phases);
  console.log(table);
  // Kept only where asked: nothing of a run stays in /tmp.
  const dir = process.env.FULLLOOP_REPORT_DIR;
  if (dir) writeFileSync(join(dir, 'fullloop-phases.txt'), `${table}\n`);
});

describe.each(firmwares)('full loop, %s', (firmware) => {
  it('enroll, clean, deploy, instance configures itself from the config drive, undeploy, clean', async () => {
    if (!image) throw new Error('FULLLOOP_IMAGE unset: run through scripts/fullloop/run.sh (npm run test:fullloop)');
    const run = mkdtempSync(`/tmp/fullloop-${firmware}-`);
    let passed = false;
    const rig = await startRig(firmware, run, image);
    const record = (phase: string, ms: number) => phases.push({ firmware, phase, ms });
    const lastPowerOn = (device: string) =>
      rig
        .bmcEvents()
        .filter((e) => e.text.startsWith(`power on`) && e.text.includes(`device=${device}`))
        .at(-1);
    try {
      record('Ironic up', rig.ironicUpMs);
      const { api } = rig;
      const node = await api.call<{ uuid: string }>('POST', '/v1/nodes', {
        name: `fullloop-${firmware}`,
        driver: 'ipmi',
        boot_interface: 'ipxe',
        deploy_interface: 'direct',
        driver_info: {
          ipmi_address: '127.0.0.1',
          ipmi_port: BMC_PORT,
          ipmi_username: 'admin',
          ipmi_password: 'password',
          deploy_kernel: `http://${HOST}:${HTTP_PORT}/images/deploy.kernel`,
          deploy_ramdisk: `http://${HOST}:${HTTP_PORT}/images/deploy.initramfs`,
        },
        properties: { cpu_arch: 'x86_64', capabilities: `boot_mode:${firmware}` },
      });
      await api.call('POST', '/v1/ports', { node_uuid: node.uuid, address: MAC, pxe_enabled: true });
      await api.provision(node.uuid, 'manage');
      await api.waitFor(node.uuid, 'manage', (n) => n.provision_state === 'manageable', 120_000);

      // provide: automated cleaning boots the ramdisk through ipxe and runs the agent's clean steps
      const provideAt = Date.now();
      await api.provision(node.uuid, 'provide');
      const looked = await api.waitFor(
        node.uuid,
        'cleaning: ramdisk lookup',
        (n) => typeof n.driver_internal_info.agent_url === 'string' || n.provision_state === 'available',
        900_000,
      );
      const powerOn = lastPowerOn('network');
      expect(powerOn, 'the BMC powered the machine on from the network').toBeDefined();
      const lookupAt = Date.now();
      record('power-on -> lookup (cleaning)', lookupAt - Math.max(powerOn!.t, provideAt));
      // the agent's default auto-TLS, as IPA's: Ironic then talks HTTPS to it, pinned to the certificate it was sent
      expect(looked.driver_internal_info.agent_url).toBe('https://127.0.0.1:9999');
      const available = await api.waitFor(node.uuid, 'cleaning', (n) => n.provision_state === 'available', 900_000);
      record('cleaning', Date.now() - lookupAt);
      expect(available.power_state).toBe('power off');

      // deploy with a config drive Ironic builds from JSON
      const configdrive = {
        meta_data: {
          hostname: `fullloop-${firmware}`,
          public_keys: {
            fullloop: 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFULLLOOPtestkeyonlyforthefullloopsuite0000 fullloop',
          },
        },
        user_data: `#cloud-config\nruncmd:\n  - |\n    echo "FULLLOOP-MARKER host=$(hostname) addr=$(ip -4 -o addr show scope global | awk '{print $4}')" > /dev/ttyS0\n`,
        network_data: {
          links: [{ id: 'nic0', type: 'phy', ethernet_mac_address: MAC, mtu: 1500 }],
          networks: [
            {
              id: 'net0',
              type: 'ipv4',
              link: 'nic0',
              ip_address: STATIC_IP,
              netmask: '255.255.255.0',
              network_id: 'fullloop',
              routes: [],
            },
          ],
          services: [],
        },
      };
      await api.call('PATCH', `/v1/nodes/${node.uuid}`, [
        {
          op: 'add',
          path: '/instance_info',
          value: {
            image_source: rig.imageUrl,
            image_disk_format: 'qcow2',
            image_os_hash_algo: 'sha256',
            image_os_hash_value: rig.imageSha256,
          },
        },
      ]);
      const deployAt = Date.now();
      await api.provision(node.uuid, 'active', { configdrive });
      await api.waitFor(node.uuid, 'deploy', (n) => n.provision_state === 'active', 1_200_000);
      record('deploy (power-on -> active)', Date.now() - deployAt);
      // The compressed cloud image went the streaming route: no buffer in the ramdisk's RAM, no fallback.
      const agentConsole = rig
        .serials()
        .map(([, text]) => text)
        .join('\n');
      expect(agentConsole, 'the agent streamed the qcow2 image').toContain(
        'qcow2 image placed by the streaming reader',
      );
      expect(agentConsole).not.toContain('the image cannot be streamed');

      // the instance: booted from disk by the BMC, configured by cloud-init from the config drive
      const diskBoot = lastPowerOn('hd');
      expect(diskBoot, 'Ironic set boot device disk and powered on').toBeDefined();
      const deadline = Date.now() + 900_000;
      let screen = '';
      for (;;) {
        screen = rig.serials().at(-1)?.[1] ?? '';
        if (screen.includes('FULLLOOP-MARKER') && /Cloud-init v\. \S+ finished/.test(screen)) break;
        if (Date.now() > deadline)
          throw new Error(`instance: no cloud-init finish/marker on the console; tail:\n${screen.slice(-3000)}`);
        await new Promise((r) => setTimeout(r, 3000));
      }
      record('instance boot -> cloud-init done', Date.now() - diskBoot!.t);
      // the datasource is the config drive on the partition the agent added after the image's three
      const ds = /Datasource DataSourceConfigDrive \[[^\]]*\]\[source=\/dev\/vda(\d+)\]/.exec(screen);
      expect(ds, 'cloud-init used DataSourceConfigDrive').not.toBeNull();
      expect(Number(ds![1])).toBeGreaterThan(3);
      expect(screen).toMatch(
        new RegExp(`FULLLOOP-MARKER host=fullloop-${firmware} addr=${STATIC_IP.replaceAll('.', '\\.')}/24`),
      );

      // undeploy: power off, ramdisk again, cleaning, available and off
      const undeployAt = Date.now();
      await api.provision(node.uuid, 'deleted');
      const after = await api.waitFor(node.uuid, 'undeploy', (n) => n.provision_state === 'available', 1_200_000);
      record('undeploy (-> cleaning -> available)', Date.now() - undeployAt);
      expect(after.power_state).toBe('power off');
      // network boots: cleaning on provide, deploy (no fast track), cleaning on undeploy
      expect(
        rig.bmcEvents().filter((e) => e.text.startsWith('power on') && e.text.includes('device=network')).length,
      ).toBe(3);
      passed = true;
    } finally {
      await rig.stop();
      // A passed run leaves nothing behind (its disks are 1.6 GB); a failed one keeps its logs and disks to read.
      if (passed) rmSync(run, { recursive: true, force: true });
      else console.log(`full loop ${firmware}: kept ${run} for its logs`);
    }
  });
});
