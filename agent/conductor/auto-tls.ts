// Auto-TLS: a self-signed certificate for the agent API, made at every boot, with IPA's properties:
// EC key on the configured curve, CN = hostname, SAN = the advertise IP (critical), signed with
// SHA-512, valid from one hour ago (clock skew between ramdisk and conductor) for 30 days.
//
// Why Node's crypto and not `openssl` via exec.ts: Node makes and signs with the key but has no
// certificate builder, so ~60 lines of DER (der.ts) assemble it. That keeps the ramdisk free of an
// openssl binary (busybox + node only) and keeps the back-dated not-before, which `openssl req -x509`
// of OpenSSL 3.0 (Debian 12) cannot set.
import { createPrivateKey, generateKeyPair, randomBytes, sign, X509Certificate, type KeyObject } from 'node:crypto';
import { promisify } from 'node:util';
import { hostname } from 'node:os';
import { isIP } from 'node:net';
import {
  bitString,
  boolean,
  explicit,
  ipBytes,
  octetString,
  oid,
  sequence,
  set,
  time,
  tlv,
  unsignedInteger,
  utf8String,
} from './der.ts';

export interface AgentCertificate {
  /** PKCS#8 PEM. */
  key: string;
  /** The certificate PEM: served by the API and sent as `agent_verify_ca`. */
  cert: string;
}

const CURVES = { p256: 'prime256v1', p384: 'secp384r1', p521: 'secp521r1' } as const;
const ECDSA_SHA512 = '1.2.840.10045.4.3.4';
const COMMON_NAME = '2.5.4.3';
const SUBJECT_ALT_NAME = '2.5.29.17';
const VALID_DAYS = 30;
const CLOCK_SKEW_MS = 3600_000;

function pem(label: string, der: Buffer): string {
  const lines = der.toString('base64').match(/.{1,64}/g) ?? [];
  return `-----BEGIN ${label}-----\n${lines.join('\n')}\n-----END ${label}-----\n`;
}

/** A SAN entry: iPAddress [7] for an IP, dNSName [2] for a name given as ipa-advertise-host. */
function altName(host: string): Buffer {
  return isIP(host) ? tlv(0x87, ipBytes(host)) : tlv(0x82, Buffer.from(host, 'ascii'));
}

export interface AgentKeys {
  privateKey: KeyObject;
  publicKey: KeyObject;
}

/**
 * The certificate's key pair, made off the main thread so that a boot can make it while it waits for the
 * conductor: under emulation (TCG) the key and the TLS setup after lookup took two seconds of boot time.
 */
export function generateKeys(curve: keyof typeof CURVES): Promise<AgentKeys> {
  return promisify(generateKeyPair)('ec', { namedCurve: CURVES[curve] });
}

export function generateCertificate(advertiseHost: string, keys: AgentKeys, now = new Date()): AgentCertificate {
  const { privateKey, publicKey } = keys;
  const name = sequence(set(sequence(oid(COMMON_NAME), utf8String(hostname() || 'ironic-node-agent'))));
  const algorithm = sequence(oid(ECDSA_SHA512));
  const serial = randomBytes(16);
  serial[0]! &= 0x7f;
  const tbs = sequence(
    explicit(0, unsignedInteger(Buffer.from([2]))),
    unsignedInteger(serial),
    algorithm,
    name,
    sequence(time(new Date(now.getTime() - CLOCK_SKEW_MS)), time(new Date(now.getTime() + VALID_DAYS * 86400_000))),
    name,
    publicKey.export({ type: 'spki', format: 'der' }),
    explicit(
      3,
      sequence(sequence(oid(SUBJECT_ALT_NAME), boolean(true), octetString(sequence(altName(advertiseHost))))),
    ),
  );
  const signature = sign('sha512', tbs, privateKey);
  return {
    key: privateKey.export({ type: 'pkcs8', format: 'pem' }) as string,
    cert: pem('CERTIFICATE', sequence(tbs, algorithm, bitString(signature))),
  };
}

/**
 * Whether a certificate carried over a crash of the previous run can serve this one: the conductor keeps
 * the `agent_verify_ca` it was first sent and refuses a heartbeat with another, so a restarted agent
 * must serve the same one, while it still names the advertised host and has a day left.
 */
export function certificateServes(material: AgentCertificate, advertiseHost: string, now = new Date()): boolean {
  try {
    const cert = new X509Certificate(material.cert);
    if (!cert.checkPrivateKey(createPrivateKey(material.key))) return false;
    if (new Date(cert.validTo).getTime() < now.getTime() + 86400_000) return false;
    return isIP(advertiseHost)
      ? cert.checkIP(advertiseHost) !== undefined
      : cert.checkHost(advertiseHost) !== undefined;
  } catch {
    return false;
  }
}
