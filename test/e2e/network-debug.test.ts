// The node's real network and a debug login, in one QEMU boot of the built ramdisk:
// - a second NIC on a wire of UDP datagrams on loopback (QEMU's `-netdev socket`), on whose other end the test
//   plays a switch port sending LLDP frames (chassis MAC, port name, one announced VLAN) raw onto the NIC;
// - `ipa-collect-lldp=1 ipa-enable-vlan-interfaces=all`: the agent captures the frame, makes `NIC.VID` with the
//   ramdisk kernel's 8021q (this host's kernel has none) and posts both in the inventory to the test, which
//   stands in for Ironic's inspection callback;
// - `sshkey="…"` (DIB dynamic-login's parameter): root logs in with the test's key through the forwarded port 22,
//   and by key only. The other side, no `sshkey` and nothing on port 22, is the rescue test's boot
//   (ramdisk.test.ts).
import { truncate, writeFile } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { switchFrame } from '../helpers/lldp-frames.ts';
import { workDir } from '../helpers/make-image.ts';
import { switchWire, type SwitchWire } from './switch-wire.ts';
import { HOST_IN_GUEST, OUT, startVm, until, type Vm } from './vm.ts';

const CALLBACK_PORT = 5051;
const MACS = { boot: '52:54:00:2d:00:01', wire: '52:54:00:2d:00:02' };
const SWITCH = { src: '0c:42:a1:5e:77:10', port: 'Ethernet7', system: 'leaf-07.rack3', vlan: 142 };
const hex = (s: string) => Buffer.from(s).toString('hex');

let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm | undefined;
let server: Server;
let switchSide: SwitchWire | undefined;
const posts: Record<string, any>[] = [];

beforeAll(async () => {
  work = await workDir('ina-e2e-netdebug-');
  server = createServer(async (req, res) => {
    let raw = '';
    for await (const c of req) raw += c;
    posts.push(JSON.parse(raw));
    res.writeHead(202, { 'content-type': 'application/json' }).end('{"uuid":"5d1f1c9e-2b7a-4d8e-9f0a-6c3b2a1d0e42"}');
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
});

afterAll(async () => {
  switchSide?.close();
  if (vm) {
    await vm.kill();
    await writeFile(join(OUT, 'e2e-serial-network-debug.log'), vm.serial());
  }
  await new Promise((r) => server.close(r));
  await work?.cleanup();
});

describe('network and debug login in QEMU', () => {
  it('LLDP reaches the NIC: the inventory reports it, the announced VLAN is made as NIC.VID; sshkey: root logs in by that key only', async () => {
    // The operator's key pair, in dropbear's format for dbclient; its public line goes on the kernel command line.
    const key = join(work.dir, 'id_ed25519');
    await execa('dropbearkey', ['-t', 'ed25519', '-f', key]);
    const pub = (await execa('dropbearkey', ['-y', '-f', key])).stdout
      .split('\n')
      .find((l) => l.startsWith('ssh-ed25519 '))!
      .split(' ')
      .slice(0, 2)
      .join(' ');
    const vda = join(work.dir, 'vda.img');
    await writeFile(vda, '');
    await truncate(vda, 64 * 1024 * 1024);

    const sent = switchFrame(SWITCH);
    switchSide = await switchWire(sent.frame);

    vm = await startVm({
      disk: vda,
      serialLog: join(work.dir, 'serial.log'),
      mac: MACS.boot,
      wireNics: [{ mac: MACS.wire, ...switchSide }],
      forwards: [{ guestPort: CALLBACK_PORT, hostPort: (server.address() as AddressInfo).port }],
      ssh: true,
      append: () =>
        `ipa-inspection-callback-url=http://${HOST_IN_GUEST}:${CALLBACK_PORT}/v1/continue_inspection ` +
        `BOOTIF=01-${MACS.boot.replaceAll(':', '-')} ipa-collect-lldp=1 ipa-lldp-timeout=20 ` +
        `ipa-enable-vlan-interfaces=all sshkey="${pub} e2e@ina"`,
    });
    const v = vm;
    await until('the inspection POST', async () => (posts.length > 0 ? true : undefined), 600_000, 500);
    const inv = posts[0]!.inventory;
    const wire = inv.interfaces.find((i: any) => i.mac_address === MACS.wire && !i.name.includes('.'));
    expect(wire).toBeDefined();
    // The frame as the switch sent it, every TLV; among them chassis id (subtype 4, MAC), port id (subtype 5,
    // name), system name and the 802.1 VLAN name that Ironic's hooks read.
    expect(wire.lldp).toEqual(sent.tlvs);
    expect(wire.lldp).toEqual(
      expect.arrayContaining([
        [1, `04${SWITCH.src.replaceAll(':', '')}`],
        [2, `05${hex(SWITCH.port)}`],
        [5, hex(SWITCH.system)],
        [127, `0080c203${SWITCH.vlan.toString(16).padStart(4, '0')}07${hex(`vlan${SWITCH.vlan}`)}`],
      ]),
    );
    // The boot NIC hears no switch: listened to, nothing came.
    expect(inv.interfaces.find((i: any) => i.mac_address === MACS.boot).lldp).toEqual([]);
    // The VLAN the switch announced, made on that NIC and reported beside it (the parent's MAC, as the kernel gives).
    const vlanName = `${wire.name}.${SWITCH.vlan}`;
    expect(inv.interfaces.find((i: any) => i.name === vlanName)).toMatchObject({ mac_address: MACS.wire });

    // The debug login: root, by the key, through the forwarded port 22; no host key to check (a fresh one each boot).
    const ssh = (args: string[], env: Record<string, string> = {}) =>
      execa('dbclient', ['-y', '-y', '-p', String(v.sshPort), ...args], { env, reject: false, timeout: 90_000 });
    const login = await until(
      'a login by the key',
      async () => {
        const r = await ssh([
          '-i',
          key,
          'root@127.0.0.1',
          'echo "I am $(id -un), uid $(id -u)"; cat /proc/net/vlan/config',
        ]);
        return r.exitCode === 0 ? r : undefined;
      },
      120_000,
      2000,
    );
    expect(login.stdout).toMatch(/^I am root, uid 0$/m);
    // The kernel's own VLAN table: the link is a real 802.1Q interface on the NIC, with the announced id.
    expect(login.stdout).toMatch(
      new RegExp(`^${vlanName.replace('.', '\\.')}\\s*\\| ${SWITCH.vlan}\\s*\\| ${wire.name}$`, 'm'),
    );
    // Key only: without the key, no password opens it (root has none; password logins are off without rootpwd).
    const password = await ssh(['root@127.0.0.1', 'echo in'], { DROPBEAR_PASSWORD: 'anything' });
    expect(password.exitCode).not.toBe(0);
    expect(password.stdout).toBe('');
    // What the agent logged at start, read over the same login.
    const log = await ssh(['-i', key, 'root@127.0.0.1', 'grep -h "debug login" /run/ina/agent.log | head -n 1']);
    expect(log.stdout).toMatch(/debug login: root by SSH key \(sshkey\) on port 22/);
  }, 900_000);
});
