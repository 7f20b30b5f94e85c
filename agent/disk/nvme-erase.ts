// NVMe secure erase with Format NVM, as IPA does it: `nvme id-ctrl -o json`; the controller must support
// Format (OACS bit 1); crypto erase (SES 2) when FNA bit 2 says the controller can, else user-data erase
// (SES 1). Beyond IPA: only a namespace node is formatted (never a partition), and when FNA says the format
// or its secure erase reaches every namespace (bit 0, bit 1: the NVM subsystem's, not only the controller's),
// every other namespace there must be one we erase too. When sysfs cannot say which namespaces those are, the
// format is refused rather than assumed to stay inside.
import { BlockDeviceEraseError, errorText, ToolError } from '../errors.ts';
import { run } from '../exec.ts';
import { listSys, readSys } from '../host/sysfs.ts';
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

/**
 * Only nvme-cli's own failure status is the drive's refusal, which may fall back to another method. nvme-cli
 * missing or timed out says nothing about the drive (a timed-out format may still be running): that error goes
 * up unchanged and fails the step, as in IPA.
 */
function refusal(message: string, err: unknown): unknown {
  if (err instanceof ToolError && err.exitCode !== null)
    return new BlockDeviceEraseError(`${message}: ${errorText(err)}`);
  return err;
}

export async function identifyController(disk: string, log?: Logger): Promise<NvmeController> {
  let stdout: string;
  try {
    ({ stdout } = await run('nvme', ['id-ctrl', disk, '-o', 'json'], { log }));
  } catch (err) {
    throw refusal(`Failed to fetch NVMe capabilities for device ${disk}`, err);
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

/**
 * Kernel names of every namespace in the NVM subsystem `name` belongs to: those under each of its controllers
 * (`nvme0n1`; `nvme0c1n1` is a path of the multipath head `nvme0n1`) and the heads under the subsystem itself.
 * The subsystem is the one `/sys/block/<name>/device` names (a controller, or with native multipath the
 * subsystem), matched by its NQN.
 */
async function subsystemNamespaces(name: string, sys: string): Promise<Set<string>> {
  const nqn = await readSys(`${sys}/block/${name}/device/subsysnqn`);
  const found = new Set<string>();
  if (!nqn) return found;
  const add = (entries: string[]) => {
    for (const e of entries) {
      const path = /^nvme(\d+)c\d+n(\d+)$/.exec(e);
      if (path) found.add(`nvme${path[1]}n${path[2]}`);
      else if (/^nvme\d+n\d+$/.test(e)) found.add(e);
    }
  };
  for (const cls of ['nvme', 'nvme-subsystem']) {
    for (const dev of await listSys(`${sys}/class/${cls}`)) {
      if ((await readSys(`${sys}/class/${cls}/${dev}/subsysnqn`)) === nqn)
        add(await listSys(`${sys}/class/${cls}/${dev}`));
    }
  }
  return found;
}

export interface NvmeOptions {
  log?: Logger;
  /** Kernel names of every disk this step erases (a format of all namespaces must stay inside them). */
  erasing: ReadonlySet<string>;
  /** Where sysfs is (tests give a tree of their own). */
  sys?: string;
  /** Runs once every check has passed, just before the format (the read-back's canaries). */
  beforeFormat?: () => Promise<void>;
}

export async function nvmeSecureErase(disk: string, name: string, opts: NvmeOptions): Promise<NvmeMethod> {
  const log = opts.log;
  if (!nvmeController(name))
    throw new BlockDeviceEraseError(`${disk} is not an NVMe namespace; only whole namespaces are formatted`);
  const id = await identifyController(disk, log);
  if ((id.oacs & 0b10) === 0)
    throw new BlockDeviceEraseError(`nvme-cli did not return any supported format modes for device: ${disk}`);
  const crypto = (id.fna & 0b100) !== 0;
  if ((id.fna & 0b11) !== 0) {
    const all = await subsystemNamespaces(name, opts.sys ?? '/sys');
    if (!all.has(name)) {
      throw new BlockDeviceEraseError(
        `Formatting ${disk} would erase every namespace of its NVM subsystem (FNA ${id.fna}), and sysfs does not say which namespaces those are`,
      );
    }
    const others = [...all].filter((ns) => ns !== name && !opts.erasing.has(ns)).sort();
    if (others.length > 0) {
      throw new BlockDeviceEraseError(
        `Formatting ${disk} would erase every namespace of its NVM subsystem (FNA ${id.fna}), including ${others.map((n) => `/dev/${n}`).join(', ')}, which this step does not erase`,
      );
    }
  }
  const ses = crypto ? 2 : 1;
  await opts.beforeFormat?.();
  log?.info({ disk, ses, oacs: id.oacs, fna: id.fna, sanicap: id.sanicap }, 'NVMe format started');
  try {
    await run('nvme', ['format', disk, '-s', String(ses), '-f'], { log, timeoutMs: 24 * 3600_000 });
  } catch (err) {
    throw refusal(`Failed to nvme format device ${disk}`, err);
  }
  return crypto ? 'nvme crypto erase' : 'nvme user-data erase';
}
