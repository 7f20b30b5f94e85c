// The note that an image write to a device is under way, beside the status file: written (synchronously, before
// the device's first byte changes) when a sink prepares the device, removed once the image is on it and its
// table settled, or once a failed write was wiped. A process that dies in between (SIGKILL, the OOM killer, a
// crash) leaves the note behind, and the next start clears that device (`clearUnfinishedWrite`): a half-written
// disk then holds neither the new image's partition table (held back until the end, held-back.ts) nor
// anything of the old one.
import { readFileSync, realpathSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { basename } from 'node:path';
import { clearSignatures } from '../../disk/signatures.ts';
import { errorText } from '../../errors.ts';
import { readSys } from '../../host/sysfs.ts';
import type { Logger } from '../../log.ts';
import { isObject } from '../../parse.ts';
import type { DeviceGuard } from '../../safety/device-guard.ts';

export interface UnfinishedWrite {
  device: string;
  /** The device's size in bytes when the write began. */
  size: number;
  /** Epoch seconds. */
  started_at: number;
  /**
   * The kernel's boot id when the write began. On storage that survives a reboot, a device path may name
   * another disk after it: the note is acted on only within the boot that wrote it.
   */
  boot_id?: string;
}

const BOOT_ID = '/proc/sys/kernel/random/boot_id';

function bootId(file = BOOT_ID): string | undefined {
  try {
    return readFileSync(file, 'utf8').trim() || undefined;
  } catch {
    return undefined;
  }
}

/** The block device's size in bytes from /sys, or undefined when it is not a block device there. */
async function currentSize(device: string): Promise<number | undefined> {
  let name: string;
  try {
    name = basename(realpathSync(device));
  } catch {
    return undefined;
  }
  const sectors = await readSys(`/sys/class/block/${name}/size`);
  return sectors !== null && /^\d+$/.test(sectors) ? Number(sectors) * 512 : undefined;
}

/** Where the note lives: beside the status file (none without one). */
export function journalPath(statusFile: string | undefined): string | undefined {
  return statusFile ? `${statusFile}.device-write` : undefined;
}

export class WriteJournal {
  constructor(
    private readonly file: string | undefined,
    private readonly bootIdFile = BOOT_ID,
  ) {}

  /** Notes the write; synchronous, so that the note is on disk before the caller touches the device. */
  begin(device: string, size: number): void {
    if (!this.file) return;
    const note: UnfinishedWrite = { device, size, started_at: Date.now() / 1000, boot_id: bootId(this.bootIdFile) };
    writeFileSync(`${this.file}.tmp`, JSON.stringify(note), { mode: 0o600 });
    renameSync(`${this.file}.tmp`, this.file);
  }

  end(): void {
    if (this.file) rmSync(this.file, { force: true });
  }
}

/** The write a previous run left unfinished, if its note is there and well-formed. */
export function unfinishedWrite(file: string): UnfinishedWrite | undefined {
  let doc: unknown;
  try {
    doc = JSON.parse(readFileSync(file, 'utf8').slice(0, 4096));
  } catch {
    return undefined;
  }
  if (!isObject(doc) || typeof doc.device !== 'string' || typeof doc.size !== 'number' || !(doc.size > 0))
    return undefined;
  return {
    device: doc.device,
    size: doc.size,
    started_at: Number(doc.started_at) || 0,
    ...(typeof doc.boot_id === 'string' ? { boot_id: doc.boot_id } : {}),
  };
}

/**
 * At start: clears the device a previous run was writing when it died (signatures, first and last MiB), through
 * the device guard, so a disk outside the allow-list or mounted is left alone (and said so). Returns what it did,
 * for the console line; the note is removed either way, so that a refused device does not block every start.
 */
export async function clearUnfinishedWrite(
  statusFile: string | undefined,
  guard: DeviceGuard,
  log: Logger,
  bootIdFile = BOOT_ID,
): Promise<string | undefined> {
  const file = journalPath(statusFile);
  if (!file) return undefined;
  const note = unfinishedWrite(file);
  if (!note) {
    rmSync(file, { force: true });
    return undefined;
  }
  const since = new Date(note.started_at * 1000).toISOString();
  let line: string;
  const now = bootId(bootIdFile);
  const size = await currentSize(note.device);
  // A device that cannot be shown to be the one written is left alone: wiping another disk is worse than
  // leaving a half-written one (whose image's table was held back, so it does not look bootable anyway).
  const other =
    note.boot_id === undefined || now === undefined || note.boot_id !== now
      ? `the machine has rebooted since (boot id ${note.boot_id ?? 'unknown'}, now ${now ?? 'unknown'}), so the path may name another disk`
      : size !== undefined && size !== note.size
        ? `it now holds ${size} bytes, not the ${note.size} written to, so it is another disk`
        : undefined;
  if (other) {
    line = `left ${note.device} alone, named by an image write begun at ${since} that never finished: ${other}`;
    log.warn({ device: note.device, started_at: since }, line);
    rmSync(file, { force: true });
    return line;
  }
  try {
    await clearSignatures(note.device, note.size, guard, log);
    line = `cleared ${note.device}: an image write begun at ${since} never finished (the agent was killed)`;
    log.warn({ device: note.device, started_at: since }, line);
  } catch (err) {
    line = `could not clear ${note.device}, left by an image write begun at ${since} that never finished: ${errorText(err)}`;
    log.error({ device: note.device, started_at: since, err: errorText(err) }, line);
  }
  rmSync(file, { force: true });
  return line;
}
