// The helper /init runs on a virtual-media boot (agent/netconf/main.ts), applied for real inside a network
// namespace this test creates (root).
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterEach, describe, expect, it } from 'vitest';
import { DOC, MAC_A, MAC_B } from '../helpers/network-data-doc.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

describe('network_data.json: the helper /init runs, inside a network namespace', () => {
  const ns = `ina-netconf-${process.pid}`;
  afterEach(async () => {
    await execa('ip', ['netns', 'del', ns], { reject: false });
  });

  // This host's kernel has veth but neither bonding nor 8021q: bonds and VLANs are checked as plans (above).
  it('gives a veth NIC its static address and default route, leaves the DHCP one alone, writes the nameservers, and names the NIC it configured', async () => {
    const dir = await testTempDir('ina-netconf-');
    await execa('ip', ['netns', 'add', ns]);
    const inNs = (...args: string[]) => execa('ip', ['-n', ns, ...args]);
    await inNs('link', 'add', 'p0', 'address', MAC_A, 'type', 'veth', 'peer', 'name', 'q0');
    await inNs('link', 'add', 'p1', 'address', MAC_B, 'type', 'veth', 'peer', 'name', 'q1');
    await inNs('link', 'set', 'q0', 'up');
    await inNs('link', 'set', 'q1', 'up');
    const doc = {
      links: DOC.links.slice(0, 2),
      networks: [
        { ...DOC.networks[0], link: 'port-a' },
        { ...DOC.networks[2], link: 'port-b' },
      ],
      services: DOC.services,
    };
    await writeFile(join(dir, 'network_data.json'), JSON.stringify(doc));
    const helper = [process.execPath, '--import', 'tsx', 'agent/netconf/main.ts'];
    const r = await execa('ip', [
      'netns',
      'exec',
      ns,
      ...helper,
      `--network-data=${join(dir, 'network_data.json')}`,
      `--resolv-conf=${join(dir, 'resolv.conf')}`,
    ]);
    expect(r.stdout).toBe('p0');
    expect((await inNs('-4', '-o', 'addr', 'show', 'dev', 'p0')).stdout).toContain('inet 192.0.2.10/24');
    expect((await inNs('link', 'show', 'dev', 'p0')).stdout).toMatch(/mtu 9000 .*state UP/);
    expect((await inNs('-4', '-o', 'addr', 'show', 'dev', 'p1')).stdout).toBe('');
    expect((await inNs('link', 'show', 'dev', 'p1')).stdout).toMatch(/state UP/);
    expect((await inNs('-4', 'route', 'show', 'default')).stdout).toContain('default via 192.0.2.1 dev p0');
    expect(await readFile(join(dir, 'resolv.conf'), 'utf8')).toBe('nameserver 192.0.2.53\nnameserver 198.51.100.53\n');

    // A document it cannot apply: one line on stderr, exit 1, so that /init falls back to DHCP.
    await writeFile(join(dir, 'bad.json'), '{"links": 3}');
    const bad = await execa('ip', ['netns', 'exec', ns, ...helper, `--network-data=${join(dir, 'bad.json')}`], {
      reject: false,
    });
    expect(bad.exitCode).toBe(1);
    expect(bad.stdout).toBe('');
    expect(bad.stderr.trim()).toBe('network_data.json: links: must be a list');
  });

  it('undoes what it made when a step fails, so that DHCP starts from a clean NIC', async () => {
    const dir = await testTempDir('ina-netconf-');
    await execa('ip', ['netns', 'add', ns]);
    await execa('ip', ['-n', ns, 'link', 'add', 'p0', 'address', MAC_A, 'type', 'veth', 'peer', 'name', 'q0']);
    // The route's gateway is not on the link: the kernel refuses it after the address went on.
    const doc = {
      links: [DOC.links[0]],
      networks: [
        {
          ...DOC.networks[0],
          link: 'port-a',
          routes: [{ network: '198.51.100.0', netmask: '255.255.255.0', gateway: '203.0.113.1' }],
        },
      ],
    };
    await writeFile(join(dir, 'network_data.json'), JSON.stringify(doc));
    const r = await execa(
      'ip',
      [
        'netns',
        'exec',
        ns,
        process.execPath,
        '--import',
        'tsx',
        'agent/netconf/main.ts',
        `--network-data=${join(dir, 'network_data.json')}`,
      ],
      { reject: false },
    );
    expect(r.exitCode).toBe(1);
    expect(r.stdout).toBe('');
    expect(r.stderr).toMatch(
      /^network_data\.json: ip -4 route replace 198\.51\.100\.0\/24 via 203\.0\.113\.1 dev p0 failed \(exit code 2\): /,
    );
    expect((await execa('ip', ['-n', ns, '-4', '-o', 'addr', 'show', 'dev', 'p0'])).stdout).toBe('');
  });
});
