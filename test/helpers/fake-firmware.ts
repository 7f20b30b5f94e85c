// A fake firmware root for erase_pstore and clean_uefi_nvram (the agent's --ina-firmware-root): `proc/mounts`
// naming a pstore mount, the pstore folder with a previous tenant's crash records, and an efivars folder with
// UEFI boot entries in efivarfs' file format (4 bytes of attributes, then an EFI_LOAD_OPTION), which the real
// efibootmgr reads and deletes through libefivar's EFIVARFS_PATH. Never the host's firmware.
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const GLOBAL_GUID = '8be4df61-93ca-11d2-aa0d-00e098032b8c';
/** non-volatile, boot-service and runtime access */
const ATTRS = Buffer.from([7, 0, 0, 0]);

const utf16z = (s: string) => Buffer.from(`${s}\0`, 'utf16le');

function pathNode(type: number, subtype: number, body: Buffer): Buffer {
  const head = Buffer.alloc(4);
  head[0] = type;
  head[1] = subtype;
  head.writeUInt16LE(4 + body.length, 2);
  return Buffer.concat([head, body]);
}

/** HD(part,GPT,…) — a partition of a disk, as a disk boot entry starts. */
function hd(partition: number): Buffer {
  const b = Buffer.alloc(38);
  b.writeUInt32LE(partition, 0);
  b.writeBigUInt64LE(2048n, 4);
  b.writeBigUInt64LE(65536n, 12);
  Buffer.from('0123456789abcdef0123456789abcdef', 'hex').copy(b, 20);
  b[36] = 2; // GPT
  b[37] = 2; // GUID signature
  return pathNode(4, 1, b);
}

const file = (path: string) => pathNode(4, 4, utf16z(path));

/** PciRoot(0x0), as a network boot entry starts. */
function pciRoot(): Buffer {
  const b = Buffer.alloc(8);
  b.writeUInt32LE(0x0a0341d0, 0);
  return pathNode(2, 1, b);
}

const END = pathNode(0x7f, 0xff, Buffer.alloc(0));

function loadOption(label: string, nodes: Buffer[]): Buffer {
  const paths = Buffer.concat([...nodes, END]);
  const head = Buffer.alloc(6);
  head.writeUInt32LE(1, 0); // LOAD_OPTION_ACTIVE
  head.writeUInt16LE(paths.length, 4);
  return Buffer.concat([head, utf16z(label), paths]);
}

export interface FakeBootEntry {
  num: string;
  label: string;
  /** A disk loader (HD(1,GPT,…)/File(loader)), or a network boot (PciRoot). */
  loader?: string;
}

export interface FakeFirmware {
  root: string;
  efivars: string;
  pstore: string;
  /** Boot entry numbers left in the efivars folder. */
  bootEntries(): Promise<string[]>;
  pstoreEntries(): Promise<string[]>;
  close(): Promise<void>;
}

export async function fakeFirmware(opts: {
  entries: FakeBootEntry[];
  pstore?: string[];
  pstoreMounted?: boolean;
}): Promise<FakeFirmware> {
  const root = await mkdtemp(join(tmpdir(), 'ina-firmware-root-'));
  const efivars = join(root, 'sys', 'firmware', 'efi', 'efivars');
  const pstore = join(root, 'sys', 'fs', 'pstore');
  await mkdir(efivars, { recursive: true });
  await mkdir(pstore, { recursive: true });
  await mkdir(join(root, 'proc'));
  const mounts = [
    'sysfs /sys sysfs rw,nosuid,nodev,noexec,relatime 0 0',
    'proc /proc proc rw,nosuid,nodev,noexec,relatime 0 0',
  ];
  if (opts.pstoreMounted ?? true) mounts.push('pstore /sys/fs/pstore pstore rw,nosuid,nodev,noexec,relatime 0 0');
  await writeFile(join(root, 'proc', 'mounts'), `${mounts.join('\n')}\n`);
  for (const name of opts.pstore ?? []) await writeFile(join(pstore, name), `crash record ${name}\n`);
  const put = (name: string, data: Buffer) =>
    writeFile(join(efivars, `${name}-${GLOBAL_GUID}`), Buffer.concat([ATTRS, data]));
  for (const e of opts.entries) {
    await put(`Boot${e.num}`, loadOption(e.label, e.loader ? [hd(1), file(e.loader)] : [pciRoot()]));
  }
  const order = Buffer.alloc(2 * opts.entries.length);
  for (const [i, e] of opts.entries.entries()) order.writeUInt16LE(parseInt(e.num, 16), 2 * i);
  await put('BootOrder', order);
  return {
    root,
    efivars,
    pstore,
    bootEntries: async () =>
      (await readdir(efivars))
        .map((n) => /^Boot([0-9A-F]{4})-/.exec(n)?.[1])
        .filter((n): n is string => !!n)
        .sort(),
    pstoreEntries: async () => (await readdir(pstore)).sort(),
    close: () => rm(root, { recursive: true, force: true }),
  };
}
