// A throwaway certificate authority and one server certificate it signed, made with openssl for the
// loopback addresses the OCI scenario listens on. A real CA (not a self-signed leaf) because Ironic's
// Python client verifies the chain with the CA file it is given ([oci]verify_ca), as an operator would.
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { execa } from 'execa';

export interface TestCa {
  /** The CA certificate (PEM file): what Ironic and the agent are told to trust. */
  caFile: string;
  /** The server's certificate and key, valid for every address in `ips`. */
  certFile: string;
  keyFile: string;
}

const EC = ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes'];

export async function makeTestCa(dir: string, ips: string[]): Promise<TestCa> {
  const caKey = join(dir, 'ca.key');
  const caFile = join(dir, 'ca.pem');
  const keyFile = join(dir, 'server.key');
  const csr = join(dir, 'server.csr');
  const certFile = join(dir, 'server.pem');
  const ext = join(dir, 'server.ext');
  await execa('openssl', [
    'req',
    '-x509',
    ...EC,
    '-days',
    '1',
    '-subj',
    '/CN=ina-test-ca',
    '-keyout',
    caKey,
    '-out',
    caFile,
    '-addext',
    'basicConstraints=critical,CA:TRUE',
    '-addext',
    'keyUsage=critical,keyCertSign,cRLSign',
  ]);
  await execa('openssl', ['req', '-new', ...EC, '-subj', `/CN=${ips[0]}`, '-keyout', keyFile, '-out', csr]);
  await writeFile(
    ext,
    [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature',
      'extendedKeyUsage=serverAuth',
      `subjectAltName=${ips.map((ip) => `IP:${ip}`).join(',')}`,
      'subjectKeyIdentifier=hash',
      'authorityKeyIdentifier=keyid',
      '',
    ].join('\n'),
  );
  await execa('openssl', [
    'x509',
    '-req',
    '-in',
    csr,
    '-CA',
    caFile,
    '-CAkey',
    caKey,
    '-set_serial',
    '2',
    '-days',
    '1',
    '-extfile',
    ext,
    '-out',
    certFile,
  ]);
  return { caFile, certFile, keyFile };
}
