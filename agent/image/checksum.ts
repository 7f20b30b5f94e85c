// Checksums: which algorithm, what the expected digest is (literal or from a checksum file in bare,
// GNU or BSD format), and the comparison. Pure functions; hashing itself happens in the pipeline.
import { ImageChecksumError, ImageDownloadError } from '../errors.ts';

/** Node's names for the algorithms an image may be verified with. */
export type ImageHashAlgo =
  | 'md5'
  | 'sha1'
  | 'sha224'
  | 'sha256'
  | 'sha384'
  | 'sha512'
  | 'sha3-256'
  | 'sha3-512'
  | 'blake2b512';

// Glance/Python names on the left, Node's on the right.
const KNOWN: Record<string, ImageHashAlgo> = {
  md5: 'md5',
  sha1: 'sha1',
  sha224: 'sha224',
  sha256: 'sha256',
  sha384: 'sha384',
  sha512: 'sha512',
  sha3_256: 'sha3-256',
  'sha3-256': 'sha3-256',
  sha3_512: 'sha3-512',
  'sha3-512': 'sha3-512',
  blake2b: 'blake2b512',
};

export function hashAlgoFor(name: string): ImageHashAlgo | undefined {
  return Object.hasOwn(KNOWN, name) ? KNOWN[name] : undefined;
}

/** IPA's rule for a bare digest: the length names the algorithm. */
export function algoForDigest(digest: string): ImageHashAlgo | undefined {
  return ({ 32: 'md5', 64: 'sha256', 128: 'sha512' } as const)[digest.length as 32 | 64 | 128];
}

/** Hex characters in each algorithm's digest. */
export const DIGEST_HEX_LENGTH: Record<ImageHashAlgo, number> = {
  md5: 32,
  sha1: 40,
  sha224: 56,
  sha256: 64,
  sha384: 96,
  sha512: 128,
  'sha3-256': 64,
  'sha3-512': 128,
  blake2b512: 128,
};

export const HEX = /^[0-9a-f]+$/i;
const DIGEST_LENGTHS = new Set(Object.values(DIGEST_HEX_LENGTH));

function isDigest(s: string): boolean {
  return HEX.test(s) && DIGEST_LENGTHS.has(s.length);
}

function escapeRegExp(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}

/**
 * The digest a checksum file gives for one of `fileNames`: a bare digest, a GNU line (`<hex>  [*]name`) or
 * a BSD line (`ALGO (name) = <hex>`). Comment lines (`#`) are skipped; the first match wins.
 */
export function parseChecksumFile(text: string, fileNames: readonly string[], source: string): string {
  const lines = text
    .split(/\r?\n/)
    .map((l) => l.trim())
    .filter((l) => l !== '');
  if (lines.length === 0) throw new ImageDownloadError(`Empty checksum file ${source}`);
  if (lines.length === 1 && !/\s/.test(lines[0]!)) {
    if (isDigest(lines[0]!)) return lines[0]!.toLowerCase();
    throw new ImageDownloadError(`Invalid checksum file ${source}: no valid checksum found`);
  }
  for (const name of fileNames) {
    const n = escapeRegExp(name);
    const gnu = new RegExp(`^([0-9a-f]+)\\s+\\*?(?:\\./)?${n}$`, 'i');
    const bsd = new RegExp(`^[\\w-]+\\s*\\(${n}\\)\\s*=\\s*([0-9a-f]+)$`, 'i');
    for (const line of lines) {
      if (line.startsWith('#')) continue;
      const m = gnu.exec(line) ?? bsd.exec(line);
      if (m && isDigest(m[1]!)) return m[1]!.toLowerCase();
    }
  }
  throw new ImageDownloadError(`Checksum file ${source} does not contain name ${fileNames.join(' or ')}`);
}

/** The last path segment of an image URL as a checksum file names it: decoded, or as written when it is not UTF-8. */
function fileName(url: string): string {
  const segment = new URL(url).pathname.split('/').pop() ?? '';
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
}

/** The last path segment of each image URL: what a checksum file names the image by. */
export function imageFileNames(urls: readonly string[]): string[] {
  return [...new Set(urls.map(fileName).filter(Boolean))];
}

export interface ExpectedDigest {
  algo: ImageHashAlgo;
  digest: string;
}

/** Combines the declared algorithm (if any) with the digest; refuses md5 when it is disabled. */
export function expectedDigest(
  declared: ImageHashAlgo | undefined,
  digest: string,
  md5Enabled: boolean,
): ExpectedDigest {
  const value = digest.trim().toLowerCase();
  if (!HEX.test(value)) throw new ImageChecksumError(`Expected checksum is not a hex digest: ${digest}`);
  const algo = declared ?? algoForDigest(value);
  if (!algo) {
    throw new ImageChecksumError(
      `Cannot tell the checksum algorithm from a digest of ${value.length} characters; give os_hash_algo`,
    );
  }
  if (algo === 'md5' && !md5Enabled) {
    throw new ImageChecksumError(
      'MD5 checksums are disabled on this agent (ipa-md5-enabled=false); use sha256 or sha512',
    );
  }
  return { algo, digest: value };
}

export function verifyDigest(expected: ExpectedDigest, actual: string, imageId: string, location: string): void {
  if (actual.toLowerCase() === expected.digest) return;
  // `actual` tells one wrong download from another (transfer.ts downloads again only for a new digest).
  throw new ImageChecksumError(
    `Image failed to verify against checksum. location: ${location}; image ID: ${imageId}; ` +
      `image checksum: ${expected.digest}; verification checksum: ${actual} (${expected.algo})`,
    { actual: actual.toLowerCase() },
  );
}
