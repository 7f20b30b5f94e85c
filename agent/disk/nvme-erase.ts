// NVMe secure erase with Format NVM, as IPA does it: `nvme id-ctrl -o json`; the controller must support
// Format (OACS bit 1); crypto erase (SES 2) when FNA bit 2 says the controller can, else user-data erase
// (SES 1). Beyond IPA: only a namespace node is formatted (never a partition), and when FNA bit 0 says a
// format covers every namespace of the controller, every other namespace must be one we erase too.
import { readdir } from 'node:fs/promises';
import { BlockDeviceEraseError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import type { Logger } from '../log.ts';

export interface NvmeController {
  oacs: number;
  fna: number;
  sanicap: number;
}

export type NvmeMethod = 'nvme crypto erase' | 'nvme user-data erase';

/** `nvme0n1` → controller `nvme0`; null for anything that is not a namespace (e.g. `nvme0n1p1`). */
export function nvmeController(name: string): string | null {
  return /^(nvme\d+)n\d+$/.exec(name)?.[1] ?? null;
}

export async function identifyController(disk: string, log?: Logger): Promise<NvmeController> {
  let stdout: string;
  try {
    ({ stdout } = await run('nvme', ['id-ctrl', disk, '-o', 'json'], { log }));
  } catch (err) {
    throw new BlockDeviceEraseError(`Failed to fetch NVMe capabilities for device ${disk}: ${errorText(err)}`);
  }
  let doc: Record<string, unknown>;
  try {
    doc = stdout.trim() === '' ? {} : (JSON.parse(stdout) as Record<string, unknown>);
  } catch {
    throw new BlockDeviceEraseError(`nvme-cli printed something that is not JSON for device ${disk}`);
  }
  if (Object.keys(doc).length === 0)
    throw new BlockDeviceEraseError(`nvme-cli did not return any information for device: ${disk}`);
  const num = (k: string) => (Number.isInteger(doc[k]) ? (doc[k] as number) : 0);
  return { oacs: num('oacs'), fna: num('fna'), sanicap: num('sanicap') };
}

/** The controller's namespaces' kernel names, from /sys/class/nvme/<ctrl>/. */
async function namespaces(ctrl: string): Promise<string[]> {
  const entries = await readdir(`/sys/class/nvme/${ctrl}`).catch(() => [] as string[]);
  return entries.filter((e) => /^nvme\d+n\d+$/.test(e));
}

export interface NvmeOptions {
  log?: Logger;
  /** Kernel names of every disk this step erases (a format of all namespaces must stay inside them). */
  erasing: ReadonlySet<string>;
}

export async function nvmeSecureErase(disk: string, name: string, opts: NvmeOptions): Promise<NvmeMethod> {
  const log = opts.log;
  const ctrl = nvmeController(name);
  if (!ctrl) throw new BlockDeviceEraseError(`${disk} is not an NVMe namespace; only whole namespaces are formatted`);
  const id = await identifyController(disk, log);
  if ((id.oacs & 0b10) === 0)
    throw new BlockDeviceEraseError(`nvme-cli did not return any supported format modes for device: ${disk}`);
  const crypto = (id.fna & 0b100) !== 0;
  if ((id.fna & 0b1) !== 0) {
    const others = (await namespaces(ctrl)).filter((ns) => ns !== name && !opts.erasing.has(ns));
    if (others.length > 0) {
      throw new BlockDeviceEraseError(
        `Formatting ${disk} would erase every namespace of ${ctrl} (FNA bit 0), including ${others.map((n) => `/dev/${n}`).join(', ')}, which this step does not erase`,
      );
    }
  }
  const ses = crypto ? 2 : 1;
  log?.info({ disk, ses, oacs: id.oacs, fna: id.fna, sanicap: id.sanicap }, 'NVMe format started');
  try {
    await run('nvme', ['format', disk, '-s', String(ses), '-f'], { log, timeoutMs: 24 * 3600_000 });
  } catch (err) {
    throw new BlockDeviceEraseError(`Failed to nvme format device ${disk}: ${errorText(err)}`);
  }
  return crypto ? 'nvme crypto erase' : 'nvme user-data erase';
}
