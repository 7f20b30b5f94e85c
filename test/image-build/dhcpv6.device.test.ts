// The ramdisk's IPv6 client: dhcpcd with the ramdisk's /etc/dhcpcd.conf and hook (image-build/rootfs/etc),
// against dnsmasq sending router advertisements and answering stateful DHCPv6, as IPv6 provisioning networks do,
// in a network namespace and a private mount namespace this test creates (root): /run, /var/lib, resolv.conf and
// the kernel log stay the test's own.
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa, type ResultPromise } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { testTempDir } from '../helpers/temp-dir.ts';

const ROOTFS = join(import.meta.dirname, '..', '..', 'image-build', 'rootfs');
const ns = `ina-dhcp6-${process.pid}`;
let server: ResultPromise | undefined;

describe('dhcpcd (IPv6) as the ramdisk runs it, inside a network namespace', () => {
  afterEach(async () => {
    server?.kill();
    await server?.catch(() => undefined);
    server = undefined;
    await execa('ip', ['netns', 'del', ns], { reject: false });
  });

  it('takes the stateful DHCPv6 address, the default route from the router advertisement, the name server, and leaves the lease mark /init waits for', async () => {
    const dir = await testTempDir('ina-dhcp6-');
    await writeFile(join(dir, 'resolv.conf'), '');
    const inNs = (...args: string[]) => execa('ip', ['-n', ns, ...args]);
    await execa('ip', ['netns', 'add', ns]);
    await inNs('link', 'add', 'p0', 'address', '52:54:00:aa:bb:61', 'type', 'veth', 'peer', 'name', 'q0');
    await inNs('link', 'set', 'lo', 'up');
    await inNs('link', 'set', 'q0', 'up');
    await inNs('addr', 'add', 'fd00:61::1/64', 'dev', 'q0', 'nodad');
    await inNs('link', 'set', 'p0', 'up');
    server = execa('ip', [
      'netns',
      'exec',
      ns,
      'dnsmasq',
      '--no-daemon',
      '--conf-file=/dev/null',
      '--interface=q0',
      '--bind-interfaces',
      '--port=0',
      '--dhcp-range=fd00:61::100,fd00:61::1ff,64,1h',
      '--enable-ra',
      '--dhcp-option=option6:dns-server,[fd00:61::53]',
      `--dhcp-leasefile=${join(dir, 'leases')}`,
    ]);
    const body = [
      'mount -t tmpfs none /run && mount -t tmpfs none /var/lib && mkdir -p /run/ina /var/lib/dhcpcd',
      'mount --bind "$DIR/resolv.conf" /etc/resolv.conf && mount --bind /dev/null /dev/kmsg',
      // The ramdisk's configuration, with its hook where this tree has it.
      'sed "s#^script .*#script $ROOTFS/etc/dhcpcd.script#" "$ROOTFS/etc/dhcpcd.conf" > /run/dhcpcd.conf',
      // As dhcp-nics starts it, but for one lease only (-1), within 20 s.
      'dhcpcd -B -1 -t 20 -f /run/dhcpcd.conf p0 >/dev/null 2>&1',
      'cat /run/ina/lease.p0.v6',
    ].join(' && ');
    const r = await execa('ip', ['netns', 'exec', ns, 'unshare', '-m', 'sh', '-c', body], {
      env: { DIR: dir, ROOTFS },
    });
    expect(r.stdout.trim()).toMatch(/^fd00:61::1[0-9a-f]{2}$/);
    const addrs = (await inNs('-6', '-o', 'addr', 'show', 'dev', 'p0', 'scope', 'global')).stdout;
    expect(addrs).toContain(`inet6 ${r.stdout.trim()}/128`);
    expect((await inNs('-6', 'route', 'show', 'default')).stdout).toMatch(/^default via fe80::\S+ dev p0/);
    expect(await readFile(join(dir, 'resolv.conf'), 'utf8')).toBe('nameserver fd00:61::53\n');
  });
});
