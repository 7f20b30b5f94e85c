// The conductor link's pure parts, table-driven: Ironic error bodies, token acceptance, lookup reply
// parsing, heartbeat body by version, callback URLs, route parsing, and the certificate's fields.
import { X509Certificate } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { callbackUrl, routeSource } from '../../agent/conductor/advertise.ts';
import { generateCertificate, generateKeys } from '../../agent/conductor/auto-tls.ts';
import { ipBytes } from '../../agent/conductor/der.ts';
import { heartbeatBody, type HeartbeatTarget } from '../../agent/conductor/heartbeat.ts';
import { ironicFault } from '../../agent/conductor/ironic-api.ts';
import { withLookupConfig } from '../../agent/conductor/link.ts';
import { lookupPath } from '../../agent/conductor/lookup.ts';
import { buildConfig } from '../../agent/config/config.ts';
import { nicMacs } from '../../agent/conductor/nics.ts';
import { HostRoot } from '../../agent/inspect/host-root.ts';
import { acceptToken, InvalidLookupReply, parseLookupReply } from '../../agent/conductor/lookup-reply.ts';
import { parseVersion } from '../../agent/conductor/versions.ts';
import { pythonJson } from '../helpers/agent-client.ts';

const TOKEN = 'a'.repeat(43);

describe('Ironic error bodies', () => {
  it.each([
    [
      '{"error_message": "{\\"faultcode\\": \\"Client\\", \\"faultstring\\": \\"Resource could not be found.\\", \\"debuginfo\\": null}"}',
      'Resource could not be found.',
    ],
    ['{"error_message": {"faultstring": "as an object"}}', 'as an object'],
    ['{"error_message": {"title": "Conflict", "description": "x"}}', 'Conflict'],
    ['{"error_message": "plain words"}', 'plain words'],
    ['<html>502 Bad Gateway</html>', '<html>502 Bad Gateway</html>'],
  ])('%s → %s', (body, want) => {
    expect(ironicFault(body)).toBe(want);
  });
});

describe('token acceptance (IPA rules)', () => {
  it.each([
    [TOKEN, null, TOKEN],
    [TOKEN, 'k'.repeat(40), TOKEN],
    ['******', 'k'.repeat(40), 'k'.repeat(40)],
    ['******', null, undefined],
    ['short', 'k'.repeat(40), 'k'.repeat(40)],
    ['short', null, null],
    [null, null, null],
  ] as const)('offered %s, held %s → %s', (offered, held, want) => {
    expect(acceptToken(offered, held)).toBe(want);
  });
});

describe('lookup reply', () => {
  it('keeps the node, reads the config keys the agent applies', () => {
    const r = parseLookupReply(
      JSON.stringify({
        node: {
          uuid: 'u1',
          properties: {},
          instance_info: { image_url: '******' },
          driver_internal_info: { content: '** Redacted **' },
          links: [],
        },
        config: {
          heartbeat_timeout: 30,
          agent_token: TOKEN,
          tls_min_version: '1.3',
          tls_cipher_suites: null,
          permitted_image_formats: ['raw'],
          agent_md5_checksum_enable: false,
        },
      }),
    );
    expect(r.node.uuid).toBe('u1');
    expect(r.node.driver_internal_info).toEqual({ content: '** Redacted **' });
    expect(r.config).toMatchObject({
      heartbeatTimeoutS: 30,
      agentToken: TOKEN,
      tlsMinVersion: '1.3',
      tlsCipherSuites: undefined,
      permittedImageFormats: ['raw'],
      md5Enabled: false,
    });
  });

  it("applies the reply's image settings to a new Config and leaves the one it was given as it was", () => {
    const given = buildConfig(new Map(), new Map([['standalone', 'true']]));
    const before = structuredClone(given);
    const reply = parseLookupReply(
      JSON.stringify({
        node: { uuid: 'u1' },
        config: {
          heartbeat_timeout: 30,
          permitted_image_formats: ['raw'],
          agent_md5_checksum_enable: true,
          disable_deep_image_inspection: true,
        },
      }),
    );
    const applied = withLookupConfig(given, reply.config);
    expect(applied.image).toMatchObject({ permittedFormats: ['raw'], md5Enabled: true, disableDeepInspection: true });
    expect(applied.lookup).toBe(given.lookup);
    expect(given).toEqual(before);
    // Keys the reply leaves out keep the configured values.
    const partial = withLookupConfig(
      given,
      parseLookupReply('{"node": {"uuid": "u"}, "config": {"heartbeat_timeout": 30}}').config,
    );
    expect(partial.image).toEqual(given.image);
  });

  it('turns the BIOS boot loader install on from a lookup reply, and never off (IPA applies only true)', () => {
    const reply = (v: unknown) =>
      parseLookupReply(
        JSON.stringify({ node: { uuid: 'u' }, config: { heartbeat_timeout: 30, enable_bios_bootloader_install: v } }),
      ).config;
    const off = buildConfig(new Map(), new Map([['standalone', 'true']]));
    expect(off.enableBiosBootloaderInstall).toBe(false);
    expect(withLookupConfig(off, reply(true)).enableBiosBootloaderInstall).toBe(true);
    expect(withLookupConfig(off, reply(false)).enableBiosBootloaderInstall).toBe(false);
    expect(withLookupConfig(off, reply('yes please')).enableBiosBootloaderInstall).toBe(false);
    const on = buildConfig(new Map([['ipa-enable-bios-bootloader-install', '1']]), new Map([['standalone', 'true']]));
    expect(on.enableBiosBootloaderInstall).toBe(true);
    expect(on.notActedOn.join(' ')).not.toContain('bios');
    expect(withLookupConfig(on, reply(false)).enableBiosBootloaderInstall).toBe(true);
  });

  it('accepts an old API with a top-level heartbeat_timeout and no config', () => {
    expect(parseLookupReply('{"node": {"uuid": "u"}, "heartbeat_timeout": 300}').config.heartbeatTimeoutS).toBe(300);
  });

  it.each(['not json', '{"node": {}}', '{"node": {"uuid": "u"}}', '{"config": {"heartbeat_timeout": 1}}'])(
    'refuses %s',
    (text) => {
      expect(() => parseLookupReply(text)).toThrow(InvalidLookupReply);
    },
  );

  it('builds the query with literal commas and colons', () => {
    expect(lookupPath({ macs: ['52:54:00:12:34:56', 'aa:bb:cc:dd:ee:ff'] })).toBe(
      '/v1/lookup?addresses=52:54:00:12:34:56,aa:bb:cc:dd:ee:ff',
    );
    expect(lookupPath({ macs: [], nodeUuid: 'u-1' })).toBe('/v1/lookup?node_uuid=u-1');
  });

  it.each([
    ['1.82', 82],
    ['1.115', 115],
    [' 1.9 ', 9],
    ['2.1', undefined],
    ['v1', undefined],
    [null, undefined],
  ])('version %s → %s', (v, want) => {
    expect(parseVersion(v)).toBe(want);
  });
});

describe('heartbeat body by API version', () => {
  const target = (version: number, token: string | null = TOKEN): HeartbeatTarget => ({
    nodeUuid: 'u',
    callbackUrl: 'https://192.0.2.5:9999',
    version,
    heartbeatTimeoutS: 300,
    agentVersion: '0.1.0',
    token: () => token,
    verifyCa: 'PEM',
  });
  it.each([
    [31, '{"callback_url":"https://192.0.2.5:9999"}'],
    [36, '{"callback_url":"https://192.0.2.5:9999","agent_version":"0.1.0"}'],
    [62, `{"callback_url":"https://192.0.2.5:9999","agent_token":"${TOKEN}","agent_version":"0.1.0"}`],
    [
      68,
      `{"callback_url":"https://192.0.2.5:9999","agent_token":"${TOKEN}","agent_version":"0.1.0","agent_verify_ca":"PEM"}`,
    ],
  ])('1.%i', (version, want) => {
    expect(JSON.stringify(heartbeatBody(target(version)))).toBe(want);
  });
  it('sends agent_token even when null', () => {
    expect(heartbeatBody(target(68, null))).toHaveProperty('agent_token', null);
  });
});

describe('advertise address and callback URL', () => {
  it.each([
    ['https', '192.0.2.5', 9999, 'https://192.0.2.5:9999'],
    ['http', 'fd00::5', 9999, 'http://[fd00::5]:9999'],
    ['https', 'agent.example', 8443, 'https://agent.example:8443'],
  ] as const)('%s %s %i → %s', (proto, host, port, want) => {
    expect(callbackUrl(proto, host, port)).toBe(want);
  });

  it.each([
    ['192.0.2.1 via 10.0.0.1 dev eth0 src 10.0.0.5 uid 0 \n    cache', '10.0.0.5'],
    ['local 127.0.0.1 dev lo table local src 127.0.0.1 uid 0', '127.0.0.1'],
    ['fd00::1 from :: dev eth0 proto kernel src fd00::5 metric 256 pref medium', 'fd00::5'],
    ['192.0.2.1 dev eth0 src 169.254.3.4', undefined],
    ['fe80::1 dev eth0 src fe80::2', undefined],
    ['RTNETLINK answers: Network is unreachable', undefined],
  ])('%s → %s', (out, want) => {
    expect(routeSource(out)).toBe(want);
  });
});

describe('auto-TLS certificate', () => {
  it('is EC P-384, self-signed with SHA-512, IP SAN only, valid from an hour ago for 30 days', async () => {
    const now = new Date('2026-06-01T12:00:00Z');
    const { cert, key } = generateCertificate('192.0.2.5', await generateKeys('p384'), now);
    const x = new X509Certificate(cert);
    expect(key).toMatch(/^-----BEGIN PRIVATE KEY-----/);
    expect(x.subjectAltName).toBe('IP Address:192.0.2.5');
    expect(x.publicKey.asymmetricKeyDetails?.namedCurve).toBe('secp384r1');
    expect(x.verify(x.publicKey)).toBe(true);
    expect(x.issuer).toBe(x.subject);
    expect(new Date(x.validFrom).toISOString()).toBe('2026-06-01T11:00:00.000Z');
    expect(new Date(x.validTo).toISOString()).toBe('2026-07-01T12:00:00.000Z');
    // openssl (installed by ensure-deps.sh) reads what Node's parser does not show: the signature and criticality.
    const text = await execa('openssl', ['x509', '-noout', '-text'], { input: cert });
    expect(text.stdout).toMatch(/Signature Algorithm: ecdsa-with-SHA512/);
    expect(text.stdout).toMatch(/X509v3 Subject Alternative Name: critical\s+IP Address:192\.0\.2\.5/);
  });

  it('puts an IPv6 advertise address in the SAN, a name as a DNS name', async () => {
    expect(
      new X509Certificate(generateCertificate('fd00::5', await generateKeys('p256')).cert).checkIP('fd00::5'),
    ).toBe('fd00::5');
    expect(
      new X509Certificate(generateCertificate('agent.example', await generateKeys('p256')).cert).subjectAltName,
    ).toBe('DNS:agent.example');
  });

  it.each([
    ['10.1.2.3', '0a010203'],
    ['::1', '00000000000000000000000000000001'],
    ['fd00::5:6', 'fd000000000000000000000000050006'],
    ['::ffff:1.2.3.4', '00000000000000000000ffff01020304'],
  ])('IP bytes of %s', (ip, hex) => {
    expect(ipBytes(ip).toString('hex')).toBe(hex);
  });
});

describe("Python json.dumps spacing (the conductor's request bodies)", () => {
  it('matches the fixture text', () => {
    expect(pythonJson({ name: 'get_clean_steps', params: {} })).toBe('{"name": "get_clean_steps", "params": {}}');
    expect(pythonJson({ a: [1, true, null, 'é'] })).toBe('{"a": [1, true, null, "\\u00e9"]}');
  });
});

describe('NIC MACs from sysfs', () => {
  it('keeps physical NICs with a real MAC, lower-cased, and skips lo and virtual devices', async () => {
    const root = await mkdtemp(join(tmpdir(), 'ina-sysnet-'));
    const dir = join(root, 'sys/class/net');
    try {
      const nic = async (name: string, mac: string, physical: boolean) => {
        await mkdir(join(dir, name), { recursive: true });
        await writeFile(join(dir, name, 'address'), `${mac}\n`);
        if (physical) await symlink('/sys/devices/virtual', join(dir, name, 'device'));
      };
      await nic('lo', '00:00:00:00:00:00', false);
      await nic('eth1', '52:54:00:AA:BB:02', true);
      await nic('eth0', '52:54:00:aa:bb:01', true);
      await nic('br0', '52:54:00:aa:bb:03', false);
      await nic('ib0', '80:00:00:48:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01', true);
      await nic('dummy0', '00:00:00:00:00:00', true);
      expect(await nicMacs(new HostRoot(root))).toEqual(['52:54:00:aa:bb:01', '52:54:00:aa:bb:02']);
    } finally {
      await rm(root, { recursive: true, force: true });
    }
  });
});
