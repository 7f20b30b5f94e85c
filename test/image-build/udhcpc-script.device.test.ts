// The ramdisk's DHCP hook (image-build/rootfs/etc/udhcpc.script) as busybox udhcpc calls it: the lease in
// environment variables, run with the real `ip` inside a network namespace and a private mount namespace this
// test creates (root), so that its /etc/resolv.conf and /run/ina are the test's own.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';

const SCRIPT = join(import.meta.dirname, '..', '..', 'image-build', 'rootfs', 'etc', 'udhcpc.script');
const ns = `ina-udhcpc-${process.pid}`;
let dir: string;

const inNs = (...args: string[]) => execa('ip', ['-n', ns, ...args]);

/** Runs the hook for `event` with the lease `env` (on p0 unless it names another); returns the lease file it left. */
async function hook(event: string, env: Record<string, string>): Promise<string> {
  const iface = env.interface ?? 'p0';
  const body = [
    'mount -t tmpfs none /run && mkdir /run/ina && mount --bind "$DIR/run-ina" /run/ina',
    'mount --bind "$DIR/resolv.conf" /etc/resolv.conf',
    // Its lease events go to the kernel log: here a file of the test's.
    'mount --bind "$DIR/kmsg" /dev/kmsg',
    '"$SCRIPT" "$EVENT"',
  ].join(' && ');
  await execa('ip', ['netns', 'exec', ns, 'unshare', '-m', 'sh', '-c', body], {
    env: { interface: iface, ...env, DIR: dir, SCRIPT, EVENT: event },
  });
  return readFile(join(dir, 'run-ina', `lease.${iface}`), 'utf8').catch(() => '');
}

describe('udhcpc.script, inside a network namespace', () => {
  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'ina-udhcpc-'));
    await writeFile(join(dir, 'resolv.conf'), '');
    await writeFile(join(dir, 'kmsg'), '');
    await mkdir(join(dir, 'run-ina'));
    await execa('ip', ['netns', 'add', ns]);
    await inNs('link', 'add', 'p0', 'type', 'veth', 'peer', 'name', 'q0');
    await inNs('link', 'set', 'p0', 'up');
    await inNs('link', 'set', 'q0', 'up');
  });
  afterEach(async () => {
    await execa('ip', ['netns', 'del', ns], { reject: false });
    await rm(dir, { recursive: true, force: true });
  });

  it('applies classless static routes (option 121) instead of the router option, the MTU, the address and DNS', async () => {
    const lease = await hook('bound', {
      ip: '192.0.2.10',
      mask: '24',
      router: '192.0.2.1',
      staticroutes: '198.51.100.0/24 192.0.2.254 0.0.0.0/0 192.0.2.2 203.0.113.7/32 0.0.0.0',
      mtu: '9000',
      dns: '192.0.2.53 192.0.2.54',
      domain: 'example.org',
    });
    expect(lease.trim()).toBe('192.0.2.10');
    expect((await inNs('-4', '-o', 'addr', 'show', 'dev', 'p0')).stdout).toContain('inet 192.0.2.10/24');
    expect((await inNs('link', 'show', 'dev', 'p0')).stdout).toContain('mtu 9000');
    const routes = (await inNs('-4', 'route', 'show')).stdout;
    expect(routes).toContain('default via 192.0.2.2 dev p0');
    expect(routes).not.toContain('via 192.0.2.1 ');
    expect(routes).toContain('198.51.100.0/24 via 192.0.2.254 dev p0');
    expect(routes).toContain('203.0.113.7 dev p0');
    expect(await readFile(join(dir, 'resolv.conf'), 'utf8')).toBe(
      'search example.org\nnameserver 192.0.2.53\nnameserver 192.0.2.54\n',
    );
  });

  it('uses the router option without static routes; a renewal that keeps the address leaves it and the routes through it in place; a new address replaces the old one', async () => {
    await hook('bound', { ip: '192.0.2.10', mask: '24', router: '192.0.2.1' });
    expect((await inNs('-4', 'route', 'show', 'default')).stdout).toContain('default via 192.0.2.1 dev p0');
    // A route the lease did not make: removing the address, even for a moment, would take it away.
    await inNs('route', 'add', '203.0.113.0/24', 'via', '192.0.2.254', 'dev', 'p0');
    await hook('renew', { ip: '192.0.2.10', mask: '24', router: '192.0.2.1' });
    expect((await inNs('-4', 'route', 'show')).stdout).toContain('203.0.113.0/24 via 192.0.2.254 dev p0');
    await hook('renew', { ip: '192.0.2.20', mask: '24', router: '192.0.2.1' });
    const addrs = (await inNs('-4', '-o', 'addr', 'show', 'dev', 'p0')).stdout;
    expect(addrs).toContain('inet 192.0.2.20/24');
    expect(addrs).not.toContain('192.0.2.10');
    expect((await inNs('-4', 'route', 'show', 'default')).stdout).toContain('default via 192.0.2.1 dev p0');
  });

  it("another NIC's lease adds only what nobody has: the first lease's routes stay; a renewal with a new router moves that NIC's own default route", async () => {
    await inNs('link', 'add', 'p1', 'type', 'veth', 'peer', 'name', 'q1');
    await inNs('link', 'set', 'p1', 'up');
    await hook('bound', { ip: '192.0.2.10', mask: '24', staticroutes: '10.0.0.0/8 192.0.2.254 0.0.0.0/0 192.0.2.1' });
    await hook('bound', {
      interface: 'p1',
      ip: '198.51.100.10',
      mask: '24',
      staticroutes: '10.0.0.0/8 198.51.100.254 0.0.0.0/0 198.51.100.1',
    });
    let routes = (await inNs('-4', 'route', 'show')).stdout;
    expect(routes).toContain('10.0.0.0/8 via 192.0.2.254 dev p0');
    expect(routes).toContain('default via 192.0.2.1 dev p0');
    expect(routes).not.toContain('via 198.51.100.254');
    expect(routes).not.toContain('default via 198.51.100.1');
    await hook('renew', { ip: '192.0.2.10', mask: '24', router: '192.0.2.2' });
    routes = (await inNs('-4', 'route', 'show')).stdout;
    expect(routes).toContain('default via 192.0.2.2 dev p0');
    expect(routes).not.toContain('default via 192.0.2.1');
  });

  it('says once in the kernel log that a NIC gets no lease, not at every retry; leases and renewals each get a line', async () => {
    // /dev/kmsg takes each write as one record; the file standing in for it keeps the last, so read after each.
    const lines: string[] = [];
    const run = async (event: string, env: Record<string, string> = {}) => {
      await writeFile(join(dir, 'kmsg'), '');
      await hook(event, env);
      lines.push(...(await readFile(join(dir, 'kmsg'), 'utf8')).split('\n').filter(Boolean));
    };
    for (let i = 0; i < 3; i++) await run('leasefail');
    await run('bound', { ip: '192.0.2.10', mask: '24' });
    await run('renew', { ip: '192.0.2.10', mask: '24' });
    expect(lines).toEqual([
      '<6>ina: DHCP: no lease on p0 yet',
      '<6>ina: DHCP bound on p0: 192.0.2.10/24',
      '<6>ina: DHCP renew on p0: 192.0.2.10/24',
    ]);
  });
});
