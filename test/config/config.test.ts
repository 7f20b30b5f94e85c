import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { buildConfig, loadConfig } from '../../agent/config/config.ts';
import { parseFlags, parseKernelCmdline } from '../../agent/config/sources.ts';
import { lookupKeysNotActedOn } from '../../agent/config/lookup-keys.ts';
import { ironicLookupConfig } from '../helpers/fake-conductor.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const build = (kernel: string, flags: string[] = []) => buildConfig(parseKernelCmdline(kernel), parseFlags(flags));

describe('configuration', () => {
  it('reads IPA kernel parameters and ignores unrelated ones', () => {
    const c = build(
      'BOOT_IMAGE=/vmlinuz console=ttyS0 quiet ipa-api-url=http://10.0.0.1:6385/ ipa-debug=1 ' +
        'ipa-lookup-timeout=30 BOOTIF=01-52-54-00-AB-CD-EF ipa-agent-token=abc ipa-lookup-timeout=45',
    );
    expect(c.apiUrls).toEqual(['http://10.0.0.1:6385']);
    expect(c.debug).toBe(true);
    expect(c.lookup.timeoutS).toBe(45);
    expect(c.bootifMac).toBe('52:54:00:ab:cd:ef');
    expect(c.token.agentToken).toBe('abc');
    expect(c.listen).toEqual({ host: '::', port: 9999 });
    expect(c.hostActions).toBe('simulated');
    expect(c.disks.allowlist).toBeNull();
    expect(c.image.permittedFormats).toEqual(['raw', 'qcow2']);
  });

  it('lets flags win over the kernel command line', () => {
    const c = build('ipa-api-url=http://a:1,http://b:2 ipa-listen-port=1000 ipa-debug=1', [
      '--ipa-listen-port=2000',
      '--ipa-debug=false',
      '--device-allowlist=/dev/loop3,/dev/loop4',
      '--ipa-insecure',
    ]);
    expect(c.apiUrls).toEqual(['http://a:1', 'http://b:2']);
    expect(c.listen.port).toBe(2000);
    expect(c.debug).toBe(false);
    expect(c.tls.insecure).toBe(true);
    expect(c.disks.allowlist).toEqual(['/dev/loop3', '/dev/loop4']);
  });

  it('stops on a bad value with a one-line error naming it', () => {
    expect(() => build('', ['--standalone', '--ipa-listen-port=http'])).toThrow(
      'flag --ipa-listen-port="http": expected a number',
    );
    expect(() => build('ipa-lookup-timeout=-1', ['--standalone'])).toThrow(
      'kernel parameter ipa-lookup-timeout="-1": must be at least 0',
    );
    expect(() => build('ipa-api-url=ftp://x')).toThrow(/ipa-api-url="ftp:\/\/x": expected http/);
    expect(() => build('', ['--standalone', '--ipa-debug=maybe'])).toThrow(/expected a boolean/);
    expect(() => build('', ['--standalone', '--ipa-tls-min-version=1.1'])).toThrow(/expected one of 1.2, 1.3/);
    expect(() => build('', ['--standalone', '--device-allowlist=sda'])).toThrow(/expected \/dev\/\.\.\. paths/);
    expect(() => build('', ['--standalone', '--no-such-flag=1'])).toThrow('unknown flag --no-such-flag');
    // A limit no conversion can work under is refused at start, not discovered at the first qcow2 deploy.
    expect(() => build('ipa-image-convert-memory-limit=256', ['--standalone'])).toThrow(
      'kernel parameter ipa-image-convert-memory-limit="256": must be at least 384: qemu-img cannot convert an image in less address space (MiB), see docs/safety.md',
    );
    expect(build('ipa-image-convert-memory-limit=384', ['--standalone']).image.convertMemoryLimitMiB).toBe(384);
    expect(() => build('')).toThrow(/no conductor/);
    expect(() => parseFlags(['stray'])).toThrow(/unexpected argument "stray"/);
  });

  it('names the IPA parameters it accepts without acting on them, and unknown ipa-* ones, so that main.ts can warn once', () => {
    const c = build(
      'ipa-disk-wait-attempts=5 ipa-disk-wait-delay=1 ipa-use-mdns=1 ipa-enable-vlan-interfaces=eth0.100,all ' +
        'ipa-inject-files-priority=50 ipa-colect-lldp=1 ina-console-shell=0 console=ttyS0 ipa-sshkey=x',
      ['--standalone'],
    );
    expect(c.disks.waitAttempts).toBe(5);
    expect(c.disks.waitDelayS).toBe(1);
    expect(c.vlanInterfaces).toEqual(['eth0.100', 'all']);
    expect(c.injectFilesPriority).toBe(50);
    expect(c.notActedOn).toEqual([
      'ipa-use-mdns (finding the conductor by mDNS is not supported; give ipa-api-url)',
      'kernel parameter ipa-colect-lldp (not an IPA parameter this agent knows)',
      'kernel parameter ipa-sshkey (not an IPA parameter this agent knows)',
    ]);
    expect(build('ipa-standalone=1').standalone).toBe(true);
    const d = build('', ['--standalone']);
    expect(d.notActedOn).toEqual([]);
    expect([d.disks.waitAttempts, d.disks.waitDelayS, d.injectFilesPriority, d.vlanInterfaces]).toEqual([10, 3, 0, []]);
    expect(() => build('ipa-inject-files-priority=100', ['--standalone'])).toThrow(/must be at most 99/);
    expect(() => build('ipa-disk-wait-attempts=-1', ['--standalone'])).toThrow(/must be at least 0/);
  });

  it('names the lookup config keys it does not act on when their value matters, and keys it does not know', () => {
    // What Ironic sends by default (its test_ramdisk.py key set): nothing to warn about.
    const ironic = ironicLookupConfig({ token: 'x'.repeat(43), heartbeatTimeout: 300, tlsMinVersion: '1.3' });
    expect(lookupKeysNotActedOn(ironic)).toEqual([]);
    expect(
      lookupKeysNotActedOn({
        ...ironic,
        metrics: { backend: 'statsd' },
        agent_skip_bmc_detect: true,
        enable_bios_bootloader_install: true,
        agent_new_thing: 1,
      }),
    ).toEqual([
      'config.metrics={"backend":"statsd"} (the agent emits no metrics)',
      'config.agent_skip_bmc_detect=true (the BMC is asked with ipmitool wherever the kernel exposes an IPMI device)',
      'config.agent_new_thing (not a lookup key this agent knows)',
    ]);
  });

  it('reads the command line from the file --kernel-cmdline names', async () => {
    const dir = await testTempDir('ina-cfg-');
    await writeFile(join(dir, 'cmdline'), 'ipa-api-url=http://127.0.0.1:6385 ipa-listen-port=1234\n');
    const c = loadConfig([`--kernel-cmdline=${join(dir, 'cmdline')}`]);
    expect(c.listen.port).toBe(1234);
    expect(() => loadConfig([`--kernel-cmdline=${join(dir, 'missing')}`])).toThrow(/cannot read/);
  });

  it("reads IPA's configuration files as oslo.config does: the file, then the directory's *.conf in name order; they override the kernel command line, flags override them", async () => {
    const dir = await testTempDir('ina-cfg-');
    await writeFile(
      join(dir, 'cmdline'),
      'ipa-api-url=http://10.0.0.1:6385 ipa-listen-port=1000 ipa-lookup-timeout=5\n',
    );
    await writeFile(
      join(dir, 'agent.conf'),
      '# comment\n[DEFAULT]\nlisten_port = 2000\nlookup_timeout=7\ncafile = "/etc/ironic-python-agent/ironic.crt"\n',
    );
    await mkdir(join(dir, 'conf.d'));
    await writeFile(join(dir, 'conf.d', 'b.conf'), '[DEFAULT]\nlisten_port: 4000\nip_lookup_sleep = 3\n');
    await writeFile(join(dir, 'conf.d', 'a.conf'), '[DEFAULT]\nlisten_port = 3000\n; comment\ninsecure = True\n');
    await writeFile(join(dir, 'conf.d', 'ignored.txt'), '[DEFAULT]\nlisten_port = 9\n');
    const files = [
      `--kernel-cmdline=${join(dir, 'cmdline')}`,
      `--config-file=${join(dir, 'agent.conf')}`,
      `--config-dir=${join(dir, 'conf.d')}`,
    ];
    const c = loadConfig(files);
    expect(c.apiUrls).toEqual(['http://10.0.0.1:6385']);
    expect(c.listen.port).toBe(4000);
    expect(c.lookup.timeoutS).toBe(7);
    expect(c.lookup.ipLookupSleepS).toBe(3);
    expect(c.tls.caFile).toBe('/etc/ironic-python-agent/ironic.crt');
    expect(c.tls.insecure).toBe(true);
    expect(c.notActedOn).toEqual([]);
    expect(loadConfig([...files, '--ipa-listen-port=5000']).listen.port).toBe(5000);
    // Without files (none at the default paths on a build host): the kernel command line alone.
    const bare = loadConfig([`--kernel-cmdline=${join(dir, 'cmdline')}`, `--config-dir=${join(dir, 'none')}`]);
    expect(bare.listen.port).toBe(1000);
  });

  it('names the file and option of a bad value, refuses a line that is no option, and lists the options it does not act on', async () => {
    const dir = await testTempDir('ina-cfg-');
    await writeFile(join(dir, 'cmdline'), 'ipa-api-url=http://10.0.0.1:6385\n');
    const conf = join(dir, 'agent.conf');
    const load = () => loadConfig([`--kernel-cmdline=${join(dir, 'cmdline')}`, `--config-file=${conf}`]);
    await writeFile(conf, '[DEFAULT]\nlisten_port = many\n');
    expect(load).toThrow(`option listen_port in ${conf}="many": expected a number`);
    await writeFile(conf, '[DEFAULT]\nlisten_port\n');
    expect(load).toThrow(`${conf} line 2: expected "option = value" or "[section]"`);
    await writeFile(conf, '[DEFAULT]\ncertfile = /x.pem\nsome_new_option = 3\n[mdns]\nuse_mdns = true\n');
    expect(load().notActedOn).toEqual([
      `option certfile in ${conf} (client certificates toward Ironic are not implemented)`,
      `option some_new_option in ${conf}`,
      `option [mdns] use_mdns (${conf})`,
    ]);
  });

  it('exits the process with a one-line error on a bad flag', async () => {
    const r = await execa(
      process.execPath,
      ['--import', 'tsx', 'agent/main.ts', '--standalone', '--ipa-listen-port=99999'],
      { reject: false },
    );
    expect(r.exitCode).toBe(2);
    expect(r.stderr.trim().split('\n')).toEqual([
      'ironic-node-agent: flag --ipa-listen-port="99999": must be at most 65535',
    ]);
  });

  it('reads the debug login as DIB dynamic-login does: a quoted sshkey, a rootpwd hash raw or in base64; leaves out what would not work', () => {
    const key = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx4mB8aQmKIDYvTKWT0NIfLaaXFgOGtVeM3e6ptnqV5 op@desk';
    const hash = '$6$e2e$JrOSyJc7Y9oT8mN1DJgU8.3kZKiwqKFKn4gpBk0e7TSp8CjQFmPfC5ZQXvTfA4wAlW/bEeaHT2tEvUN3Q1bDA/';
    const c = build(`console=ttyS0 sshkey="${key}" rootpwd="${hash}" ipa-debug=1`, ['--standalone']);
    expect(c.debugLogin).toEqual({ sshKey: key, rootPasswordHash: hash });
    // Neither is "accepted but not acted on" any more; the parameter after the quoted key is still read.
    expect(c.notActedOn).toEqual([]);
    expect(c.debug).toBe(true);
    // A value without the leading `$` is base64, so that no `$` needs escaping in ironic.conf.
    const b64 = Buffer.from(hash).toString('base64');
    expect(build(`rootpwd=${b64}`, ['--standalone']).debugLogin).toEqual({ rootPasswordHash: hash });
    expect(build('', ['--standalone']).debugLogin).toEqual({});
    // Unquoted, the kernel line splits the key into words: left out with what to write instead, and the agent
    // still starts (a typo in a debugging aid must not stop deploys); the other login part stays.
    expect(build(`sshkey=${key} rootpwd="${hash}"`, ['--standalone']).debugLogin).toEqual({
      rootPasswordHash: hash,
      refused: ['sshkey="ssh-ed25519": expected one quoted public key, sshkey="ssh-ed25519 AAAA… comment"'],
    });
    expect(build('sshkey="no-such-type AAAA"', ['--standalone']).debugLogin.refused).toEqual([
      expect.stringMatching(/expected one quoted public key/),
    ]);
    // A plain-text password (neither a hash nor base64 of one) is left out rather than set as a broken hash, and
    // never echoed.
    expect(build('rootpwd=secret', ['--standalone']).debugLogin).toEqual({
      refused: ['rootpwd: expected a crypt(3) hash ($6$…), or one in base64'],
    });
    expect(build('rootpwd="$6$salt$a:b"', ['--standalone']).debugLogin.refused).toEqual([
      expect.stringMatching(/expected a crypt\(3\) hash/),
    ]);
  });

  it('splits the kernel command line as the kernel does: quotes keep spaces in a value and are dropped', () => {
    const m = parseKernelCmdline('a=1 b="x y  z" c="" quiet d="e=2 f" g=h=i unclosed="j k\n');
    expect([...m]).toEqual([
      ['a', '1'],
      ['b', 'x y  z'],
      ['c', ''],
      ['d', 'e=2 f'],
      ['g', 'h=i'],
      ['unclosed', 'j k\n'],
    ]);
  });
});
