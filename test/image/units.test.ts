// Pure parts of the image path, table-driven: image_info parsing, checksum files, digest rules, format
// inspection over real image headers, no_proxy matching, compression magic, credentials in URLs.
import { readFile } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  algoForDigest,
  expectedDigest,
  imageFileNames,
  parseChecksumFile,
  verifyDigest,
} from '../../agent/image/checksum.ts';
import { detectCompression } from '../../agent/image/sniff.ts';
import { bypassesProxy } from '../../agent/image/dispatchers.ts';
import { parseImageInfo } from '../../agent/image/image-info.ts';
import { INSPECT_HEAD_BYTES, inspectImage } from '../../agent/image/inspect.ts';
import { headHasGpt } from '../../agent/image/settle.ts';
import { relocateBackupGpt } from '../../agent/image/gpt.ts';
import { shownUrl, splitCredentials } from '../../agent/image/url-credentials.ts';
import { copyFile, open, writeFile } from 'node:fs/promises';
import {
  compress,
  makeDiskImage,
  qcow2WithBackingFile,
  qcow2WithDataFile,
  toQcow2,
  workDir,
} from '../helpers/make-image.ts';
import { execa } from 'execa';
import { readDevice } from '../helpers/image-agent.ts';
import { join } from 'node:path';

const H64 = 'a'.repeat(64);
const md5On = { md5Enabled: true };

describe('parseImageInfo', () => {
  const base = { id: 'img', urls: ['http://h/img.raw'] };
  it.each([
    [{ urls: ['http://h/x'], checksum: H64 }, "Image is missing 'id' field."],
    [{ id: 'x', checksum: H64 }, "Image is missing 'urls' field."],
    [{ ...base, urls: [], checksum: H64 }, "Image 'urls' must be a list with at least one element."],
    [{ ...base, checksum: '' }, "image_info 'checksum' must be a non-empty string"],
    [
      { ...base, os_hash_algo: 'sha256' },
      "image_info 'os_hash_algo' and 'os_hash_value' must both be non-empty strings",
    ],
    [base, /^Image checksum is not available/],
    [{ ...base, os_hash_algo: 'whirlpool', os_hash_value: H64 }, /Unsupported os_hash_algo 'whirlpool'/],
    [{ ...base, urls: ['ftp://h/x'], checksum: H64 }, /only http and https/],
    [{ ...base, checksum: H64, proxies: 'x' }, "image_info 'proxies' must be an object"],
    // A digest that cannot match its algorithm is refused before anything is downloaded or cleared.
    [
      { ...base, os_hash_algo: 'sha256', os_hash_value: 'a'.repeat(63) },
      /^image_info 'os_hash_value' is not a sha256 digest \(64 hex characters\)/,
    ],
    [
      { ...base, os_hash_algo: 'sha512', os_hash_value: H64 },
      /^image_info 'os_hash_value' is not a sha512 digest \(128 hex characters\)/,
    ],
    [{ ...base, os_hash_algo: 'sha256', os_hash_value: 'g'.repeat(64) }, /is not a sha256 digest/],
    [{ ...base, checksum: 'a'.repeat(40) }, /^image_info 'checksum' is not an md5, sha256 or sha512 digest/],
    [{ ...base, checksum: 'not-a-digest' }, /^image_info 'checksum' is not an md5, sha256 or sha512 digest/],
  ])('refuses %j', (info, message) => {
    expect(() => parseImageInfo(info, md5On)).toThrow(
      expect.objectContaining({
        name: 'InvalidCommandParamsError',
        details: message instanceof RegExp ? expect.stringMatching(message) : message,
      }),
    );
  });

  it('holds md5 to ipa-md5-enabled: a short literal checksum is not usable, os_hash_algo md5 is refused', () => {
    const md5Off = { md5Enabled: false };
    const md5 = 'b'.repeat(32);
    const refusal = (details: RegExp) =>
      expect.objectContaining({ name: 'InvalidCommandParamsError', details: expect.stringMatching(details) });
    expect(() => parseImageInfo({ ...base, checksum: md5 }, md5Off)).toThrow(
      refusal(/^Image checksum is not available.* MD5 checksums are disabled/),
    );
    expect(() => parseImageInfo({ ...base, os_hash_algo: 'md5', os_hash_value: md5 }, md5Off)).toThrow(
      refusal(/^Image checksum is not available.* MD5 checksums are disabled/),
    );
    expect(() => parseImageInfo({ ...base, os_hash_algo: 'md5', os_hash_value: H64, checksum: md5 }, md5Off)).toThrow(
      refusal(/MD5 checksums are disabled/),
    );
    expect(() => parseImageInfo(base, md5Off)).toThrow(refusal(/for image verification\.$/));
    expect(
      parseImageInfo({ ...base, os_hash_algo: 'md5', os_hash_value: md5, checksum: H64 }, md5Off).checksum,
    ).toEqual({ value: H64, isUrl: false, field: 'checksum' });
    expect(parseImageInfo({ ...base, checksum: 'http://h/MD5SUMS' }, md5Off).checksum).toMatchObject({ isUrl: true });
    expect(parseImageInfo({ ...base, checksum: md5 }, md5On).checksum).toEqual({
      value: md5,
      isUrl: false,
      field: 'checksum',
    });
  });

  it('reads everything ironic sends into one typed object', () => {
    const info = parseImageInfo(
      {
        ...base,
        disk_format: 'GPT',
        stream_raw_images: true,
        os_hash_algo: 'SHA512',
        os_hash_value: ` https://h/SHA512SUMS `,
        checksum: 'b'.repeat(32),
        image_request_authorization: Buffer.from('Bearer t').toString('base64'),
        proxies: { http: 'proxy:3128', https: null },
        no_proxy: '.local',
        node_uuid: 'n',
      },
      md5On,
    );
    expect(info).toMatchObject({
      diskFormat: 'raw',
      streamRaw: true,
      checksum: { algo: 'sha512', value: 'https://h/SHA512SUMS', isUrl: true, field: 'os_hash_value' },
      authorization: 'Bearer t',
      proxies: { http: 'http://proxy:3128' },
      noProxy: '.local',
      imageType: 'whole-disk',
    });
    expect(
      parseImageInfo(
        {
          ...base,
          checksum: 'a'.repeat(32),
          image_server_auth_strategy: 'http_basic',
          image_server_user: 'u',
          image_server_password: 'p',
        },
        md5On,
      ).authorization,
    ).toBe(`Basic ${Buffer.from('u:p').toString('base64')}`);
  });
});

describe('checksum files', () => {
  it("names the image by its URL's last segment, decoded, or as written when that is not UTF-8", () => {
    expect(
      imageFileNames(['http://h/a/disk%20one.qcow2', 'http://h/b/disk%20one.qcow2', 'http://h/x%E0%A4.img']),
    ).toEqual(['disk one.qcow2', 'x%E0%A4.img']);
  });

  const d = 'c'.repeat(64);
  it.each([
    ['bare', `${d}\n`, d],
    ['GNU text', `${'0'.repeat(64)}  other.img\n${d}  img.raw\n`, d],
    ['GNU binary', `${d} *img.raw`, d],
    ['BSD', `SHA256 (img.raw) = ${d.toUpperCase()}`, d],
    ['comment first', `# ${'1'.repeat(64)}  img.raw\n${d}  img.raw`, d],
  ])('%s', (_n, text, want) => {
    expect(parseChecksumFile(text, ['img.raw'], 'u')).toBe(want);
  });

  it.each([
    ['empty', '\n\n', /Empty checksum file/],
    ['not hex', 'zz', /no valid checksum/],
    ['other file only', `${d}  other.raw\n${d}  img.raw.bak`, /does not contain name img.raw/],
    ['name is not a regex', `${d}  imgXraw`, /does not contain name img.raw/],
  ])('refuses %s', (_n, text, why) => {
    expect(() => parseChecksumFile(text, ['img.raw'], 'u')).toThrow(why);
  });
});

describe('digests', () => {
  it('chooses the algorithm by length, refuses md5 when disabled, compares case-insensitively', () => {
    expect(algoForDigest('a'.repeat(32))).toBe('md5');
    expect(algoForDigest('a'.repeat(128))).toBe('sha512');
    expect(algoForDigest('a'.repeat(40))).toBeUndefined();
    expect(() => expectedDigest(undefined, 'a'.repeat(32), false)).toThrow(/MD5 checksums are disabled/);
    expect(() => expectedDigest('md5', 'a'.repeat(32), false)).toThrow(/MD5 checksums are disabled/);
    expect(() => expectedDigest(undefined, 'a'.repeat(40), true)).toThrow(/Cannot tell the checksum algorithm/);
    const e = expectedDigest('sha256', H64.toUpperCase(), true);
    expect(() => verifyDigest(e, H64, 'id', 'url')).not.toThrow();
    expect(() => verifyDigest(e, 'b'.repeat(64), 'id', 'url')).toThrow(
      expect.objectContaining({ name: 'ImageChecksumError' }),
    );
  });
});

describe('no_proxy', () => {
  it.each([
    ['http://img.example.org/x', 'example.org', true],
    ['http://img.example.org/x', '.example.org', true],
    ['http://badexample.org/x', 'example.org', false],
    ['http://127.0.0.1:8080/x', '127.0.0.1', true],
    ['http://127.0.0.1:8080/x', '127.0.0.1:9090', false],
    ['https://h/x', '*', true],
    ['http://[::1]:80/x', '::1', true],
    ['http://h/x', undefined, false],
    ['http://10.1.2.3/x', 'example.org, 10.0.0.0/8', true],
    ['http://11.1.2.3/x', '10.0.0.0/8', false],
    ['http://192.168.7.9:6385/x', '192.168.7.0/24', true],
    ['http://[fd00::5]/x', 'fd00::/8', true],
    ['http://[fe80::5]/x', 'fd00::/8', false],
    ['http://10.1.2.3/x', '::/0', false],
    ['http://img.example.org/x', '10.0.0.0/8', false],
    ['http://[fd00::5]/x', '[fd00::]/8', true],
  ])('%s with %s', (url, noProxy, bypass) => {
    expect(bypassesProxy(new URL(url), noProxy)).toBe(bypass);
  });
});

describe('compression magic', () => {
  it.each([
    [[0x1f, 0x8b, 8], 'gzip'],
    [[0x28, 0xb5, 0x2f, 0xfd], 'zstd'],
    [[0xfd, 0x37, 0x7a, 0x58, 0x5a, 0x00], 'xz'],
    [[0xeb, 0x63, 0x90], 'none'],
  ])('%j is %s', (bytes, kind) => {
    expect(detectCompression(Buffer.from(bytes))).toBe(kind);
  });
});

describe('inspectImage over real images', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  let raw: string;
  const head = async (file: string) => (await readFile(file)).subarray(0, INSPECT_HEAD_BYTES);

  beforeAll(async () => {
    work = await workDir();
    raw = (await makeDiskImage(work.dir, { sizeMiB: 4 })).path;
  });
  afterAll(() => work.cleanup());

  it('raw GPT disk', async () => {
    const h = await head(raw);
    expect(inspectImage(h)).toEqual({ format: 'raw', unsafe: [] });
    expect(headHasGpt(h)).toBe(true);
  });

  it('qcow2: clean, backing file, external data file, encrypted', async () => {
    expect(inspectImage(await head(await toQcow2(raw)))).toEqual({
      format: 'qcow2',
      virtualSize: 4 * 1024 * 1024,
      unsafe: [],
    });
    expect(inspectImage(await head(await qcow2WithBackingFile(raw))).unsafe.join()).toMatch(/backing file: .*\.raw/);
    expect(inspectImage(await head(await qcow2WithDataFile(work.dir, 4))).unsafe.join()).toMatch(/external data file/);
    // An encrypted qcow2 is a clean one whose header's crypt_method (offset 32) is 2, LUKS. Not made by
    // `qemu-img create -o encrypt.format=luks`: its key-derivation benchmark fails on this VM when the test
    // runs beside others ("Unable to get accurate CPU usage"), and the header field is all the inspector reads.
    const encrypted = join(work.dir, 'encrypted.qcow2');
    const plain = await readFile(await toQcow2(raw));
    plain.writeUInt32BE(2, 32);
    await writeFile(encrypted, plain);
    expect(inspectImage(await head(encrypted)).unsafe).toEqual(['qcow2 image is encrypted']);
  });

  it('vmdk, vhdx, vpc, vdi, luks, iso', async () => {
    for (const [fmt, want] of [
      ['vmdk', 'vmdk'],
      ['vhdx', 'vhdx'],
      ['vpc', 'vhd'],
      ['vdi', 'vdi'],
    ] as const) {
      const out = join(work.dir, `x.${fmt}`);
      await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', fmt, raw, out]);
      const data = await readFile(out);
      expect(inspectImage(data.subarray(0, INSPECT_HEAD_BYTES), data.subarray(-512)).format).toBe(want);
    }
    const luks = Buffer.concat([Buffer.from([0x4c, 0x55, 0x4b, 0x53, 0xba, 0xbe, 0, 2]), Buffer.alloc(1024)]);
    expect(inspectImage(luks).format).toBe('luks');
    const iso = join(work.dir, 'x.iso');
    await execa('genisoimage', ['-quiet', '-V', 'x', '-o', iso, `${work.dir}/x.vdi`]);
    expect(inspectImage(await head(iso)).format).toBe('iso');
  });

  it('vmdk: the sparse files qemu-img writes pass; an embedded descriptor naming other files or a parent does not', async () => {
    const made = async (subformat: string) => {
      const out = join(work.dir, `${subformat}.vmdk`);
      await execa('qemu-img', ['convert', '-q', '-f', 'raw', '-O', 'vmdk', '-o', `subformat=${subformat}`, raw, out]);
      return (await readFile(out)).subarray(0, INSPECT_HEAD_BYTES);
    };
    const sparse = await made('monolithicSparse');
    expect(inspectImage(sparse)).toEqual({ format: 'vmdk', virtualSize: 4 * 1024 * 1024, unsafe: [] });
    expect(inspectImage(await made('streamOptimized')).unsafe).toEqual([]);
    const at = Number(sparse.readBigUInt64LE(28)) * 512;
    const descriptor = sparse.toString('latin1', at, at + Number(sparse.readBigUInt64LE(36)) * 512).replace(/\0+$/, '');
    const withDescriptor = (text: string) => {
      const copy = Buffer.from(sparse);
      copy.fill(0, at, at + 20 * 512).write(text, at, 'latin1');
      return inspectImage(copy).unsafe.join('; ');
    };
    expect(withDescriptor(descriptor.replace(/^RW .*$/m, 'RW 8192 FLAT "/etc/shadow" 0'))).toMatch(
      /extents other than one sparse extent: RW 8192 FLAT/,
    );
    expect(withDescriptor(descriptor.replace(/^(RW .*)$/m, '$1\nRW 8192 SPARSE "other.vmdk"'))).toMatch(
      /extents other than one sparse extent/,
    );
    expect(withDescriptor(descriptor.replace('monolithicSparse', 'twoGbMaxExtentSparse'))).toMatch(
      /create type twoGbMaxExtentSparse/,
    );
    expect(
      withDescriptor(descriptor.replace(/^parentCID=.*$/m, 'parentCID=1234abcd\nparentFileNameHint="base.vmdk"')),
    ).toMatch(/parent disk/);
    expect(
      withDescriptor(descriptor.replace('ddb.adapterType', '  parentFileNameHint="base.vmdk"\nddb.adapterType')),
    ).toMatch(/parent disk/);
    // A decoy descriptor elsewhere, or none declared: qemu reads sector 1 all the same.
    for (const sector of [0n, 2n]) {
      const moved = Buffer.from(sparse);
      moved.writeBigUInt64LE(sector, 28);
      expect(inspectImage(moved).unsafe.join()).toMatch(new RegExp(`descriptor at sector ${sector} `));
    }
  });

  it('a compressed image is not mistaken for a container', async () => {
    expect(inspectImage(await head(await compress(raw, 'gzip'))).format).toBe('raw');
  });
});

describe('relocateBackupGpt', () => {
  let work: Awaited<ReturnType<typeof workDir>>;
  beforeAll(async () => {
    work = await workDir();
  });
  afterAll(() => work.cleanup());

  it.each([[32], [3 * 1024 * 1024]])('writes what sgdisk -e writes, on a %i MiB disk', async (diskMiB) => {
    const img = await makeDiskImage(work.dir, { sizeMiB: 4, name: `gpt-${diskMiB}.raw`, randomKiB: 16 });
    const ours = join(work.dir, `ours-${diskMiB}`);
    const theirs = join(work.dir, `theirs-${diskMiB}`);
    for (const file of [ours, theirs]) {
      await copyFile(img.path, file);
      await execa('truncate', ['-s', `${diskMiB}M`, file]);
    }
    await execa('sgdisk', ['-e', theirs]);

    const diskBytes = diskMiB * 1024 * 1024;
    const writes = relocateBackupGpt((await readFile(img.path)).subarray(0, INSPECT_HEAD_BYTES), 512, diskBytes)!;
    expect(writes).not.toBeNull();
    const fh = await open(ours, 'r+');
    for (const w of writes) await fh.write(w.data, 0, w.data.length, w.offset);
    await fh.close();

    for (const [offset, length] of [
      [0, 64 * 1024],
      [diskBytes - 64 * 1024, 64 * 1024],
    ] as const) {
      expect(
        (await readDevice(ours, offset, offset + length)).equals(await readDevice(theirs, offset, offset + length)),
      ).toBe(true);
    }
    expect((await execa('sgdisk', ['-v', ours])).stdout).toMatch(/No problems found/);
  });

  it('declines heads without a valid GPT', () => {
    expect(relocateBackupGpt(Buffer.alloc(65536), 512, 1 << 30)).toBeNull();
  });
});

describe('credentials in image URLs', () => {
  const basic = (pair: string, enc: BufferEncoding = 'latin1') => `Basic ${Buffer.from(pair, enc).toString('base64')}`;

  it('become Basic authorization as python-requests builds it, and leave the URL', () => {
    expect(splitCredentials('http://u%40x:p%3Aw@host:8080/a/b.img?q=1')).toEqual({
      url: 'http://host:8080/a/b.img?q=1',
      authorization: basic('u@x:p:w'),
    });
    // An unencoded @ in the password: the last @ ends the userinfo.
    expect(splitCredentials('http://u:p@ss@host/i')).toEqual({ url: 'http://host/i', authorization: basic('u:p@ss') });
    // An empty password still counts; a user without any password makes no header.
    expect(splitCredentials('https://user:@host/i')).toEqual({ url: 'https://host/i', authorization: basic('user:') });
    expect(splitCredentials('https://only-user@host/i')).toEqual({ url: 'https://host/i' });
    // A stray % stays as written; latin1 where the characters allow, as requests encodes.
    expect(splitCredentials('http://u:50%zz@host/i').authorization).toBe(basic('u:50%zz'));
    expect(splitCredentials('http://u:caf%C3%A9@host/i').authorization).toBe(basic('u:café', 'latin1'));
    expect(splitCredentials('https://host/i.qcow2')).toEqual({ url: 'https://host/i.qcow2' });
    expect(splitCredentials('https://host/path@not-userinfo')).toEqual({ url: 'https://host/path@not-userinfo' });
  });

  it('are hidden wherever a URL is shown, even in one that does not parse', () => {
    expect(shownUrl('http://u:secret@host/i.img')).toBe('http://***@host/i.img');
    expect(shownUrl('http://u:secret@host:99999/')).toBe('http://***@host:99999/');
    expect(shownUrl('http://host/i@x.img')).toBe('http://host/i@x.img');
    expect(shownUrl('not a url')).toBe('not a url');
  });
});
