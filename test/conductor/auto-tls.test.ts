// Auto-TLS as the conductor meets it: the certificate from the heartbeat verifies the callback, the
// minimum TLS version comes from the lookup config (default 1.2), and TLS 1.0/1.1 are refused.
import { X509Certificate } from 'node:crypto';
import { connect, createServer, type SecureVersion } from 'node:tls';
import { afterEach, describe, expect, it } from 'vitest';
import { createAgent } from '../../agent/agent.ts';
import { certificateServes, generateCertificate, generateKeys } from '../../agent/conductor/auto-tls.ts';
import { ConductorLink } from '../../agent/conductor/link.ts';
import { nullLogger } from '../../agent/log.ts';
import { AgentClient } from '../helpers/agent-client.ts';
import { linkedConfig } from '../helpers/linked-config.ts';
import { FakeConductor, type FakeConductorOptions } from '../helpers/fake-conductor.ts';

// The NIC list is handed to the link, so these run on any host, with or without a physical NIC.
const macs = ['52:54:00:12:34:56'];
const nics = async () => macs;
const cleanups: (() => Promise<void>)[] = [];
afterEach(async () => {
  while (cleanups.length) await cleanups.pop()!();
});

/** A linked agent; returns its callback URL and the certificate it sent (as the conductor stored them). */
async function tlsAgent(opts: FakeConductorOptions = {}) {
  const fake = await FakeConductor.start({ nodes: [{ macs }], ...opts });
  cleanups.push(() => fake.close());
  const config = linkedConfig(fake.url);
  const link = new ConductorLink(createAgent(config, nullLogger), config, nullLogger, { nics });
  cleanups.push(() => link.stop());
  await link.start();
  const node = [...fake.nodes.values()][0]!;
  await fake.waitFor(() => node.internal.agent_url !== undefined, 'a stored callback URL');
  return { fake, node, url: node.internal.agent_url!, ca: node.internal.agent_verify_ca!, port: link.server!.port };
}

type Handshake = { ok: true; protocol: string | null } | { ok: false; error: string };

function handshake(
  port: number,
  min: SecureVersion,
  max: SecureVersion,
  ca?: string,
  ciphers = 'DEFAULT@SECLEVEL=0',
): Promise<Handshake> {
  return new Promise((resolve) => {
    const socket = connect({
      host: '127.0.0.1',
      port,
      minVersion: min,
      maxVersion: max,
      // OpenSSL 3 refuses TLS < 1.2 at its default security level on the client side too.
      ciphers,
      ...(ca ? { ca } : { rejectUnauthorized: false }),
    });
    socket.once('secureConnect', () => {
      resolve({ ok: true, protocol: socket.getProtocol() });
      socket.destroy();
    });
    socket.once('error', (err) => resolve({ ok: false, error: err.message }));
  });
}

/** Can this machine's OpenSSL speak TLS 1.0/1.1 at all? (A permissive server with its own cert.) */
async function oldTlsPossible(version: SecureVersion): Promise<boolean> {
  const { key, cert } = generateCertificate('127.0.0.1', await generateKeys('p256'));
  const server = createServer({ key, cert, minVersion: 'TLSv1', ciphers: 'DEFAULT@SECLEVEL=0' }, (s) => s.end());
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  try {
    return (await handshake((server.address() as { port: number }).port, version, version)).ok;
  } finally {
    server.close();
  }
}

describe('auto-TLS', () => {
  it('sends a certificate whose IP SAN is the callback host, and the callback verifies against it', async () => {
    const { url, ca, fake, node } = await tlsAgent();
    const x = new X509Certificate(ca);
    expect(x.subjectAltName).toBe('IP Address:127.0.0.1');
    expect(x.checkIP('127.0.0.1')).toBe('127.0.0.1');
    expect(x.verify(x.publicKey)).toBe(true);
    const client = fake.clientFor(node.uuid);
    cleanups.push(() => client.close());
    expect(await client.commands()).toEqual([]);
    const other = new AgentClient({
      url,
      token: node.internal.agent_secret_token,
      ca: generateCertificate('127.0.0.1', await generateKeys('p256')).cert,
    });
    cleanups.push(() => other.close());
    await expect(other.commands()).rejects.toThrow(/certificate/i);
  });

  it('sends the same certificate on every heartbeat', async () => {
    const { fake } = await tlsAgent({ heartbeatTimeout: 1 });
    await fake.waitFor(() => fake.heartbeats.length >= 3, 'three heartbeats');
    const cas = new Set(fake.heartbeats.map((h) => (h.body as { agent_verify_ca: string }).agent_verify_ca));
    expect(cas.size).toBe(1);
    expect(fake.heartbeats.every((h) => h.status === 202)).toBe(true);
  });

  for (const version of ['TLSv1', 'TLSv1.1'] as const) {
    it(`refuses ${version}`, async (ctx) => {
      if (!(await oldTlsPossible(version)))
        ctx.skip(`this OpenSSL cannot negotiate ${version} at all, so refusing it proves nothing`);
      const { port, ca } = await tlsAgent({ tlsMinVersion: '1.2' });
      const r = await handshake(port, version, version, ca);
      expect(r.ok).toBe(false);
      expect(await handshake(port, 'TLSv1.2', 'TLSv1.2', ca)).toEqual({ ok: true, protocol: 'TLSv1.2' });
    });
  }

  it('takes the minimum version from the lookup config: 1.3 refuses TLS 1.2', async () => {
    const { port, ca } = await tlsAgent({ tlsMinVersion: '1.3' });
    expect((await handshake(port, 'TLSv1.2', 'TLSv1.2', ca)).ok).toBe(false);
    expect(await handshake(port, 'TLSv1.2', 'TLSv1.3', ca)).toEqual({ ok: true, protocol: 'TLSv1.3' });
  });

  it("offers TLS 1.2 clients IPA's four ECDHE-GCM suites only, when nobody names suites", async () => {
    const { port, ca } = await tlsAgent({ tlsMinVersion: '1.2' });
    for (const suite of ['ECDHE-ECDSA-AES128-SHA', 'ECDHE-ECDSA-CHACHA20-POLY1305', 'ECDHE-ECDSA-AES256-SHA384'])
      expect((await handshake(port, 'TLSv1.2', 'TLSv1.2', ca, suite)).ok, suite).toBe(false);
    expect(await handshake(port, 'TLSv1.2', 'TLSv1.2', ca, 'ECDHE-ECDSA-AES128-GCM-SHA256')).toEqual({
      ok: true,
      protocol: 'TLSv1.2',
    });
  });

  it('defaults to TLS 1.2 when the lookup config has no tls_min_version', async () => {
    const { port, ca } = await tlsAgent({ tlsMinVersion: null });
    expect(await handshake(port, 'TLSv1.2', 'TLSv1.2', ca)).toEqual({ ok: true, protocol: 'TLSv1.2' });
  });
});

describe('a certificate carried over a crash', () => {
  it('serves again only for the same host, with its own key, while it has more than a day left', async () => {
    const keys = await generateKeys('p256');
    const made = generateCertificate('192.0.2.7', keys);
    expect(certificateServes(made, '192.0.2.7')).toBe(true);
    expect(certificateServes(made, '192.0.2.8')).toBe(false);
    expect(certificateServes(made, 'agent.example')).toBe(false);
    const other = generateCertificate('192.0.2.7', await generateKeys('p256'));
    expect(certificateServes({ key: other.key, cert: made.cert }, '192.0.2.7')).toBe(false);
    // Valid for 30 days: with 29.5 of them gone, less than a day is left.
    expect(certificateServes(made, '192.0.2.7', new Date(Date.now() + 29.5 * 86400_000))).toBe(false);
    expect(certificateServes({ key: made.key, cert: 'not a certificate' }, '192.0.2.7')).toBe(false);
    const named = generateCertificate('agent.example', keys);
    expect(certificateServes(named, 'agent.example')).toBe(true);
  });
});
