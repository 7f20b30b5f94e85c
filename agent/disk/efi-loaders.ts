// Finds the UEFI boot loaders on an EFI system partition without mounting it (mtools reads FAT
// directly). A vendor's BOOT<arch>.CSV (shim's fallback list) wins; else shim, then grub, then any other
// loader in a vendor directory; the removable-media path EFI/BOOT/BOOT<arch>.EFI is the last resort.
import { readFile } from 'node:fs/promises';
import { withTempDir } from '../host/temp-dir.ts';
import { join } from 'node:path';
import type { Logger } from '../log.ts';
import { run } from '../exec.ts';

export interface EfiLoader {
  /** Path on the ESP with forward slashes, e.g. `EFI/debian/shimx64.efi`. */
  path: string;
  /** The boot entry label. */
  label: string;
}

const MTOOLS_ENV = { MTOOLS_SKIP_CHECK: '1' };

export function efiArch(arch: string = process.arch): string {
  return arch === 'arm64' ? 'aa64' : arch === 'ia32' ? 'ia32' : 'x64';
}

/** Parses shim's BOOT<arch>.CSV (UTF-16LE): `loader,label,options,description` per line. */
export function parseBootCsv(data: Buffer): { loader: string; label: string }[] {
  const text = data[0] === 0xff && data[1] === 0xfe ? data.subarray(2).toString('utf16le') : data.toString('utf8');
  return text
    .split(/\r?\n/)
    .map((line) => line.split(','))
    .filter((f) => f.length >= 2 && f[0]!.trim() !== '')
    .map((f) => ({ loader: f[0]!.trim(), label: f[1]!.trim() }));
}

/** Picks the loaders to register from the ESP's file list (paths relative to its root). Pure. */
export function chooseLoaders(
  files: readonly string[],
  csv: ReadonlyMap<string, Buffer>,
  arch = efiArch(),
): EfiLoader[] {
  const inVendorDir = files.filter((f) => /^EFI\/[^/]+\/[^/]+$/i.test(f) && !/^EFI\/BOOT\//i.test(f));
  const fromCsv: EfiLoader[] = [];
  for (const [csvPath, data] of csv) {
    const dir = csvPath.slice(0, csvPath.lastIndexOf('/'));
    for (const { loader, label } of parseBootCsv(data)) {
      const path = files.find((f) => f.toLowerCase() === `${dir}/${loader}`.toLowerCase());
      if (path) fromCsv.push({ path, label });
    }
  }
  if (fromCsv.length > 0) return fromCsv;
  const efi = inVendorDir.filter((f) => f.toLowerCase().endsWith('.efi'));
  const name = (f: string) => f.slice(f.lastIndexOf('/') + 1).toLowerCase();
  const vendor = (f: string) => f.split('/')[1]!;
  for (const pattern of [new RegExp(`^shim${arch}\\.efi$`), new RegExp(`^grub${arch}\\.efi$`), /^(?!mm|fb).*\.efi$/]) {
    const hits = efi.filter((f) => pattern.test(name(f)));
    if (hits.length > 0) return hits.map((path) => ({ path, label: vendor(path) }));
  }
  const fallback = files.find((f) => f.toLowerCase() === `efi/boot/boot${arch}.efi`);
  return fallback ? [{ path: fallback, label: 'ironic' }] : [];
}

/** Every file under `::/EFI` on the ESP, as `EFI/...` paths. */
async function listEfiTree(esp: string, log?: Logger): Promise<string[]> {
  const { stdout, exitCode } = await run('mdir', ['-/', '-b', '-i', esp, '::/EFI'], {
    env: MTOOLS_ENV,
    okCodes: [1],
    log,
  });
  if (exitCode !== 0) return [];
  return stdout
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('::/') && !l.endsWith('/'))
    .map((l) => l.slice(3));
}

export async function findEfiLoaders(esp: string, log?: Logger): Promise<EfiLoader[]> {
  const files = await listEfiTree(esp, log);
  const csvFiles = files.filter(
    (f) => new RegExp(`^EFI/[^/]+/BOOT${efiArch()}\\.CSV$`, 'i').test(f) && !/^EFI\/BOOT\//i.test(f),
  );
  const csv = new Map<string, Buffer>();
  if (csvFiles.length > 0) {
    await withTempDir('ina-esp-', async (work) => {
      for (const [i, f] of csvFiles.entries()) {
        const local = join(work, `${i}.csv`);
        await run('mcopy', ['-n', '-i', esp, `::/${f}`, local], { env: MTOOLS_ENV, log });
        csv.set(f, await readFile(local));
      }
    });
  }
  return chooseLoaders(files, csv);
}
