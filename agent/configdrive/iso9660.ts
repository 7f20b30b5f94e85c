// Reads the files out of a small ISO9660 image in memory (a config drive), so rebuilding it as VFAT needs
// no extraction tool. Names come from Rock Ridge (NM) when present, else from the Joliet tree, else the
// plain ISO name without its `;1` version. Multi-extent files (over 4 GiB) cannot occur in a config drive.
import { InvalidImage } from '../errors.ts';

const SECTOR = 2048;

export interface IsoFile {
  /** Relative path with forward slashes, e.g. `openstack/latest/meta_data.json`. */
  path: string;
  data: Buffer;
}

interface DirRecord {
  extent: number;
  size: number;
  isDir: boolean;
  rawName: Buffer;
  systemUse: Buffer;
}

function bad(why: string): InvalidImage {
  return new InvalidImage(`config drive ISO9660 image is malformed: ${why}`);
}

function slice(iso: Buffer, start: number, length: number): Buffer {
  if (start < 0 || length < 0 || start + length > iso.length)
    throw bad(`an extent points outside the image (${start}+${length})`);
  return iso.subarray(start, start + length);
}

function parseRecord(buf: Buffer, at: number): DirRecord {
  const length = buf[at]!;
  const nameLength = buf[at + 32]!;
  if (33 + nameLength > length) throw bad('a directory record is shorter than its name');
  const suStart = at + 33 + nameLength + (nameLength % 2 === 0 ? 1 : 0);
  return {
    extent: buf.readUInt32LE(at + 2),
    size: buf.readUInt32LE(at + 10),
    isDir: (buf[at + 25]! & 0x02) !== 0,
    rawName: buf.subarray(at + 33, at + 33 + nameLength),
    systemUse: buf.subarray(Math.min(suStart, at + length), at + length),
  };
}

/** The records of a directory extent, without `.` and `..`. Records never cross a sector boundary. */
function readDirectory(iso: Buffer, rec: DirRecord): DirRecord[] {
  const data = slice(iso, rec.extent * SECTOR, rec.size);
  const out: DirRecord[] = [];
  for (let at = 0; at < data.length; ) {
    const length = data[at]!;
    if (length === 0) {
      at = (Math.floor(at / SECTOR) + 1) * SECTOR;
      continue;
    }
    if (at + length > data.length) throw bad('a directory record runs past its extent');
    const r = parseRecord(data, at);
    if (!(r.rawName.length === 1 && r.rawName[0]! <= 1)) out.push(r);
    at += length;
  }
  return out;
}

/** The Rock Ridge alternate name (SUSP `NM` entries, possibly continued), or null. */
function rockRidgeName(su: Buffer): string | null {
  let name = '';
  let found = false;
  for (let at = 0; at + 4 <= su.length; ) {
    const len = su[at + 2]!;
    if (len < 4 || at + len > su.length) break;
    if (su.toString('latin1', at, at + 2) === 'NM' && len >= 5) {
      found = true;
      name += su.toString('utf8', at + 5, at + len);
    }
    at += len;
  }
  return found ? name : null;
}

function plainName(raw: Buffer, joliet: boolean): string {
  if (joliet && raw.length % 2 !== 0) throw bad('a Joliet name has an odd byte count');
  // Joliet names are UCS-2 big-endian; Node decodes little-endian, so swap a copy.
  const text = joliet ? Buffer.from(raw).swap16().toString('utf16le') : raw.toString('latin1');
  return text.replace(/;\d+$/, '').replace(/\.$/, '');
}

/** What one walk may yield: a config drive is at most 64 MiB (IPA's limit), of a few dozen files. */
const MAX_FILE_BYTES = 64 * 1024 * 1024;

interface Walk {
  iso: Buffer;
  joliet: boolean;
  out: IsoFile[];
  /** Directory extents already walked: records that lead to one twice would multiply the tree. */
  dirs: Set<number>;
  bytes: number;
}

function walk(w: Walk, dir: DirRecord, prefix: string, depth: number): void {
  if (depth > 16) throw bad('directories nest deeper than 16 levels');
  if (w.dirs.has(dir.extent)) throw bad(`the directory at sector ${dir.extent} is reached twice`);
  w.dirs.add(dir.extent);
  for (const r of readDirectory(w.iso, dir)) {
    const name = (!w.joliet && rockRidgeName(r.systemUse)) || plainName(r.rawName, w.joliet);
    if (name === '' || name === '.' || name === '..' || name.includes('/'))
      throw bad(`unusable file name ${JSON.stringify(name)}`);
    const path = prefix ? `${prefix}/${name}` : name;
    if (r.isDir) walk(w, r, path, depth + 1);
    else {
      w.bytes += r.size;
      if (w.bytes > MAX_FILE_BYTES) throw bad(`its files hold more than ${MAX_FILE_BYTES} bytes`);
      w.out.push({ path, data: slice(w.iso, r.extent * SECTOR, r.size) });
    }
  }
}

function rootOf(iso: Buffer, descriptorAt: number): DirRecord {
  return parseRecord(iso, descriptorAt + 156);
}

/** Every regular file in the image, with its path. */
export function readIsoFiles(iso: Buffer): IsoFile[] {
  let pvd: number | null = null;
  let joliet: number | null = null;
  for (let sector = 16; (sector + 1) * SECTOR <= iso.length; sector++) {
    const at = sector * SECTOR;
    if (iso.toString('latin1', at + 1, at + 6) !== 'CD001') throw bad('volume descriptor set is broken');
    const type = iso[at]!;
    if (type === 255) break;
    if (type === 1 && pvd === null) pvd = at;
    if (type === 2 && /^%\/[@CE]/.test(iso.toString('latin1', at + 88, at + 91))) joliet = at;
  }
  if (pvd === null) throw bad('no primary volume descriptor');
  const root = rootOf(iso, pvd);
  const hasRockRidge = readDirectory(iso, root).some((r) => rockRidgeName(r.systemUse) !== null);
  const jolietAt = hasRockRidge ? null : joliet;
  const w: Walk = { iso, joliet: jolietAt !== null, out: [], dirs: new Set(), bytes: 0 };
  walk(w, jolietAt !== null ? rootOf(iso, jolietAt) : root, '', 0);
  return w.out;
}
