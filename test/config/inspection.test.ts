// The inspection parameters: the callback URL given or derived from ipa-api-url (newer IPA), defaults, and
// that a callback URL alone is a valid configuration (Ironic's managed inspection without fast track).
import { describe, expect, it } from 'vitest';
import { buildConfig } from '../../agent/config/config.ts';
import { ConfigError } from '../../agent/config/reader.ts';

const cfg = (kernel: Record<string, string>) => buildConfig(new Map(Object.entries(kernel)), new Map());

describe('inspection configuration', () => {
  it("a callback URL alone is enough; IPA's defaults apply", () => {
    const c = cfg({ 'ipa-inspection-callback-url': 'http://192.0.2.1:6385/v1/continue_inspection/' });
    expect(c.apiUrls).toEqual([]);
    expect(c.inspection).toEqual({
      callbackUrls: ['http://192.0.2.1:6385/v1/continue_inspection'],
      collectors: ['default', 'logs'],
      timeoutS: 300,
      dhcpWaitS: 60,
      dhcpAllInterfaces: false,
      collectLldp: false,
      lldpTimeoutS: 30,
    });
  });

  it('derives the callback from ipa-api-url only when collectors are named', () => {
    expect(cfg({ 'ipa-api-url': 'http://a:6385,http://b:6385/' }).inspection.callbackUrls).toEqual([]);
    expect(
      cfg({ 'ipa-api-url': 'http://a:6385,http://b:6385/', 'ipa-inspection-collectors': 'default,lldp' }).inspection,
    ).toMatchObject({
      callbackUrls: ['http://a:6385/v1/continue_inspection', 'http://b:6385/v1/continue_inspection'],
      collectors: ['default', 'lldp'],
    });
    expect(
      cfg({
        'ipa-api-url': 'http://a:6385',
        'ipa-inspection-collectors': 'default',
        'ipa-inspection-callback-url': 'http://c/x',
      }).inspection.callbackUrls,
    ).toEqual(['http://c/x']);
  });

  it('keeps BOOTIF raw for the inventory and refuses bad values', () => {
    expect(cfg({ 'ipa-api-url': 'http://a', BOOTIF: '01-52-54-00-AA-BB-CC' })).toMatchObject({
      bootif: '01-52-54-00-AA-BB-CC',
      bootifMac: '52:54:00:aa:bb:cc',
    });
    expect(() => cfg({ 'ipa-inspection-callback-url': 'ftp://x' })).toThrow(ConfigError);
    expect(() => cfg({ 'ipa-inspection-callback-url': 'http://x', 'ipa-inspection-timeout': '0' })).toThrow(
      /ipa-inspection-timeout/,
    );
    expect(() => cfg({})).toThrow(/no conductor: give ipa-api-url or ipa-inspection-callback-url/);
  });
});
