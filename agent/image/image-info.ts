// `image_info` as the conductor sends it, parsed once into a typed object. Every problem is an
// InvalidCommandParamsError, in IPA's order and words where IPA has words for it.
import { InvalidCommandParamsError } from '../errors.ts';
import { BOOLEAN_WORDS, isObject, parseBoolean } from '../parse.ts';
import { algoForDigest, DIGEST_HEX_LENGTH, HEX, hashAlgoFor, type ImageHashAlgo } from './checksum.ts';
import { shownUrl } from './url-credentials.ts';

/** Where the expected digest comes from: a literal hex value or a URL of a checksum file. */
export interface ChecksumSource {
  /** Known from `os_hash_algo`; otherwise chosen from the digest's length once the value is known. */
  algo?: ImageHashAlgo;
  value: string;
  isUrl: boolean;
  field: 'os_hash_value' | 'checksum';
}

export interface ImageInfo {
  id: string;
  urls: string[];
  /** Lower-cased; `gpt` is folded into `raw` (a conductor may send it after its own detection). */
  diskFormat?: string;
  streamRaw: boolean;
  checksum: ChecksumSource;
  /** A complete Authorization header value. */
  authorization?: string;
  proxies: { http?: string; https?: string };
  noProxy?: string;
  nodeUuid?: string;
  imageType: 'whole-disk' | 'partition';
  deployBootMode?: string;
  /** The legacy duplicate of the `configdrive` argument. */
  configdrive?: string;
}

const bad = (details: string) => new InvalidCommandParamsError(details);

function optStr(info: Record<string, unknown>, key: string): string | undefined {
  const v = info[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== 'string') throw bad(`image_info '${key}' must be a string`);
  return v;
}

function isHttpUrl(v: string): boolean {
  return v.startsWith('http://') || v.startsWith('https://');
}

export interface ImageInfoPolicy {
  md5Enabled: boolean;
}

const NOT_AVAILABLE =
  "Image checksum is not available, either the 'checksum' field or the 'os_hash_algo' and 'os_hash_value' " +
  'fields pair must be set for image verification.';
const MD5_DISABLED = 'MD5 checksums are disabled on this agent (ipa-md5-enabled=false); use sha256 or sha512.';

/**
 * As IPA validates: a literal `checksum` of 32 characters or fewer counts as md5, usable only when md5 is
 * enabled. Unlike IPA, `os_hash_algo: md5` is held to the same setting. A value fetched from a URL can only be
 * judged once it is known (checksum.ts).
 */
function parseChecksum(info: Record<string, unknown>, policy: ImageInfoPolicy): ChecksumSource {
  const algoName = optStr(info, 'os_hash_algo');
  const hashValue = optStr(info, 'os_hash_value');
  const legacy = optStr(info, 'checksum');
  if (legacy !== undefined && legacy.trim() === '') throw bad("image_info 'checksum' must be a non-empty string");
  if ((algoName !== undefined || hashValue !== undefined) && !(algoName?.trim() && hashValue?.trim())) {
    throw bad("image_info 'os_hash_algo' and 'os_hash_value' must both be non-empty strings");
  }
  if (algoName && hashValue) {
    const algo = hashAlgoFor(algoName.trim().toLowerCase());
    if (algo && (algo !== 'md5' || policy.md5Enabled)) {
      const value = hashValue.trim();
      const isUrl = isHttpUrl(value);
      // Found out only after downloading (and clearing the disk), a digest that cannot match is refused now.
      if (!isUrl && !(HEX.test(value) && value.length === DIGEST_HEX_LENGTH[algo])) {
        throw bad(
          `image_info 'os_hash_value' is not a ${algo} digest (${DIGEST_HEX_LENGTH[algo]} hex characters): ${value.slice(0, 200)}`,
        );
      }
      return { algo, value, isUrl, field: 'os_hash_value' };
    }
    if (!legacy && !algo) throw bad(`Unsupported os_hash_algo '${algoName}' and no 'checksum' to fall back on`);
  }
  if (legacy) {
    const value = legacy.trim();
    const isUrl = isHttpUrl(value);
    if (isUrl || value.length > 32 || policy.md5Enabled) {
      // Its length names its algorithm (IPA's rule); a length that names none can never match.
      if (!isUrl && !(HEX.test(value) && algoForDigest(value))) {
        throw bad(
          `image_info 'checksum' is not an md5, sha256 or sha512 digest (32, 64 or 128 hex characters): ${value.slice(0, 200)}`,
        );
      }
      return { value, isUrl, field: 'checksum' };
    }
  }
  // IPA's words, and the reason when an md5 was offered.
  const md5Offered = legacy !== undefined || algoName?.trim().toLowerCase() === 'md5';
  throw bad(md5Offered && !policy.md5Enabled ? `${NOT_AVAILABLE} ${MD5_DISABLED}` : NOT_AVAILABLE);
}

function parseProxies(info: Record<string, unknown>): ImageInfo['proxies'] {
  const p = info.proxies;
  if (p === undefined || p === null) return {};
  if (!isObject(p)) throw bad("image_info 'proxies' must be an object");
  const out: ImageInfo['proxies'] = {};
  for (const scheme of ['http', 'https'] as const) {
    const v = p[scheme];
    if (v === undefined || v === null || v === '') continue;
    if (typeof v !== 'string') throw bad(`image_info proxies.${scheme} must be a string`);
    // requests accepts a bare host:port; a URL parser needs the scheme.
    out[scheme] = /^[a-z][a-z0-9+.-]*:\/\//i.test(v) ? v : `http://${v}`;
  }
  return out;
}

function parseAuthorization(info: Record<string, unknown>): string | undefined {
  const encoded = optStr(info, 'image_request_authorization');
  if (encoded) {
    const decoded = Buffer.from(encoded, 'base64').toString('utf8');
    if (!decoded.trim()) throw bad("image_info 'image_request_authorization' is not base64 of a header value");
    return decoded;
  }
  if (optStr(info, 'image_server_auth_strategy') === 'http_basic') {
    const user = optStr(info, 'image_server_user');
    const password = optStr(info, 'image_server_password');
    if (!user || password === undefined) {
      throw bad('Missing image_server_user/image_server_password for the http_basic image server auth strategy');
    }
    return `Basic ${Buffer.from(`${user}:${password}`).toString('base64')}`;
  }
  return undefined;
}

function parseUrls(info: Record<string, unknown>): string[] {
  const urls = info.urls;
  if (!Array.isArray(urls) || urls.length === 0) throw bad("Image 'urls' must be a list with at least one element.");
  return urls.map((u, i) => {
    if (typeof u !== 'string') throw bad(`image_info urls[${i}] must be a string`);
    let parsed: URL;
    try {
      parsed = new URL(u);
    } catch {
      throw bad(`image_info urls[${i}] is not a URL: ${shownUrl(u)}`);
    }
    if (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') {
      throw bad(`image_info urls[${i}]: only http and https are supported, got ${parsed.protocol}`);
    }
    return u;
  });
}

function parseBool(info: Record<string, unknown>, key: string): boolean {
  const v = info[key];
  if (v === undefined || v === null) return false;
  const b = parseBoolean(v);
  if (b === undefined) throw bad(`image_info '${key}' must be a boolean (${BOOLEAN_WORDS}), got ${JSON.stringify(v)}`);
  return b;
}

export function parseImageInfo(value: unknown, policy: ImageInfoPolicy): ImageInfo {
  if (!isObject(value)) throw bad("'image_info' must be an object");
  for (const field of ['id', 'urls'] as const) {
    if (value[field] === undefined) throw bad(`Image is missing '${field}' field.`);
  }
  const id = value.id;
  if (typeof id !== 'string' || id === '') throw bad("image_info 'id' must be a non-empty string");
  const urls = parseUrls(value);
  const checksum = parseChecksum(value, policy);
  const diskFormat = optStr(value, 'disk_format')?.toLowerCase();
  return {
    id,
    urls,
    diskFormat: diskFormat === 'gpt' ? 'raw' : diskFormat || undefined,
    streamRaw: parseBool(value, 'stream_raw_images'),
    checksum,
    authorization: parseAuthorization(value),
    proxies: parseProxies(value),
    noProxy: optStr(value, 'no_proxy') || undefined,
    nodeUuid: optStr(value, 'node_uuid'),
    imageType: optStr(value, 'image_type') === 'partition' ? 'partition' : 'whole-disk',
    deployBootMode: optStr(value, 'deploy_boot_mode'),
    configdrive: optStr(value, 'configdrive'),
  };
}
