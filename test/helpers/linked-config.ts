// The configuration of an agent under test that links to a (fake) conductor: its API on a free loopback
// port, no wait for NICs to come up; `flags` add to or override these as kernel parameters would.
import { buildConfig, type Config } from '../../agent/config/config.ts';

export function linkedConfig(apiUrl: string, flags: Record<string, string> = {}): Config {
  return buildConfig(
    new Map(),
    new Map(
      Object.entries({
        'ipa-api-url': apiUrl,
        'ipa-listen-host': '127.0.0.1',
        'ipa-listen-port': '0',
        'ipa-nic-wait-timeout': '0',
        // Root runs these tests: no disk may be writable unless a test allow-lists it.
        'device-allowlist': '/dev/null',
        ...flags,
      }),
    ),
  );
}
