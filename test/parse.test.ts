// One set of rules for booleans wherever they come from: kernel parameters, command params, image_info and
// the lookup reply read the same words the same way, and refuse (or, for the lookup, ignore) the rest.
import { describe, expect, it } from 'vitest';
import { optBool } from '../agent/commands/params.ts';
import { parseLookupReply } from '../agent/conductor/lookup-reply.ts';
import { buildConfig } from '../agent/config/config.ts';
import { parseImageInfo } from '../agent/image/image-info.ts';
import { parseNumber, parseWholeNumber } from '../agent/parse.ts';

const info = (stream: unknown) =>
  parseImageInfo(
    { id: 'img', urls: ['http://h/img.raw'], checksum: 'a'.repeat(64), stream_raw_images: stream },
    { md5Enabled: true },
  );
const flag = (value: string) =>
  buildConfig(
    new Map(),
    new Map([
      ['standalone', 'true'],
      ['ipa-insecure', value],
    ]),
  ).tls.insecure;
const lookup = (value: unknown) =>
  parseLookupReply(
    JSON.stringify({ node: { uuid: 'u' }, config: { heartbeat_timeout: 30, agent_md5_checksum_enable: value } }),
  ).config.md5Enabled;

describe('booleans', () => {
  it.each([
    [true, true],
    ['true', true],
    ['True', true],
    ['yes', true],
    ['on', true],
    ['1', true],
    ['t', true],
    ['y', true],
    [false, false],
    ['false', false],
    ['no', false],
    ['off', false],
    ['0', false],
    ['f', false],
    ['N', false],
  ] as const)('%j reads as %s in image_info, command params, kernel parameters and the lookup reply', (word, value) => {
    expect(info(word).streamRaw).toBe(value);
    expect(optBool({ ignore_bootloader_failure: word }, 'ignore_bootloader_failure')).toBe(value);
    if (typeof word === 'string') expect(flag(word)).toBe(value);
    expect(lookup(word)).toBe(value);
  });

  it.each(['maybe', 'ture', '2', 7, {}, []])('%j is refused everywhere (ignored in the lookup reply)', (word) => {
    expect(() => info(word)).toThrow(
      expect.objectContaining({
        name: 'InvalidCommandParamsError',
        details: expect.stringMatching(/stream_raw_images' must be a boolean/),
      }),
    );
    expect(() => optBool({ k: word }, 'k')).toThrow(/must be a boolean/);
    if (typeof word === 'string') expect(() => flag(word)).toThrow(/expected a boolean/);
    expect(lookup(word)).toBeUndefined();
  });

  it('reads an absent stream_raw_images as false, as IPA does', () => {
    expect(info(undefined).streamRaw).toBe(false);
    expect(info(null).streamRaw).toBe(false);
  });
});

describe('whole numbers', () => {
  it('are JSON integers or their digits as text, within the bounds; anything else is refused', () => {
    expect([0, 3, '7', ' 10 ', '+2'].map((v) => parseWholeNumber(v, 0, 10))).toEqual([0, 3, 7, 10, 2]);
    const refused = ['abc', '', -1, 2.5, '2.5', 1e300, '1e3', '0x10', 11, true, null, [], {}, Number.NaN];
    for (const v of refused) expect(parseWholeNumber(v, 0, 10), String(v)).toBeUndefined();
  });
});

describe('numbers', () => {
  it('are JSON numbers or decimal text as Python reads them; JavaScript-only spellings are refused', () => {
    const read = [600, '600', '0.5', ' 2 ', '-1', '+3', '1e3', '1E-1', '.5', '5.'].map((v) => parseNumber(v));
    expect(read).toEqual([600, 600, 0.5, 2, -1, 3, 1000, 0.1, 0.5, 5]);
    const refused = ['', ' ', 'abc', '0x10', '0b1', '0o7', 'Infinity', '1_000', '1e', '5..', Number.NaN, Infinity];
    for (const v of [...refused, true, null, [], {}]) expect(parseNumber(v), String(v)).toBeUndefined();
  });

  it('in kernel parameters, flags and config files: a number, and a whole one where the option is one', () => {
    const build = (flags: [string, string][]) => buildConfig(new Map(), new Map([['standalone', 'true'], ...flags]));
    expect(build([['ipa-lookup-timeout', '1e1']]).lookup.timeoutS).toBe(10);
    expect(build([['ipa-lookup-timeout', '0.5']]).lookup.timeoutS).toBe(0.5);
    expect(build([['ipa-listen-port', '+8080']]).listen.port).toBe(8080);
    expect(() => build([['ipa-lookup-timeout', '0x10']])).toThrow(
      'flag --ipa-lookup-timeout="0x10": expected a number',
    );
    expect(() => build([['ipa-listen-port', '0x10']])).toThrow('flag --ipa-listen-port="0x10": expected a number');
    for (const v of ['80.0', '8e1', '80.5'])
      expect(() => build([['ipa-listen-port', v]])).toThrow(`flag --ipa-listen-port="${v}": expected a whole number`);
  });
});
