// Whether the config drive will find its place once the image is written, judged from the image before the
// disk changes; otherwise the old disk is gone by the time the config drive step finds out. The rules are
// partition.ts's: a partition labelled config-2 is reused if the drive fits it; else a new 64 MiB partition
// goes into the largest free region (GPT, whose backup the image step moves to the disk's end) or after the
// last partition (MBR, at most four primaries). The check refuses only what the write would refuse too: a
// partition whose filesystem it does not recognise may be an old config-2 and be reused.
// A streamed image shows only its first ROOM_HEAD_BYTES (a streamed qcow2: what of its guest those bytes
// hold). When the answer hangs on a label beyond them, the image is sent the buffered way (needsBuffer),
// where the whole image is read before the disk changes: the decision is always made before the first write.
import { ConfigDriveError, ImageWriteError } from '../errors.ts';
import { mbrTailRegion, tailPlacement, MiB, type Region } from '../disk/partition-table.ts';
import type { ImageView, SinkTarget } from '../image/sinks/sink.ts';
import type { Logger } from '../log.ts';
import { identifyDrive, isConfigDriveLabel } from './format.ts';
import { CONFIG_DRIVE_PARTITION_BYTES } from './partition.ts';
import type { ConfigDriveImage } from './prepare.ts';

interface Slot {
  number: number;
  /** Bytes. */
  start: number;
  size: number;
}

interface Table {
  kind: 'gpt' | 'mbr';
  slots: Slot[];
  /** Why no new partition can be added, or null when one can. */
  noNewPartition: string | null;
}

/** Bytes of a partition's start that hold the labels this check reads (ISO 9660's descriptor ends at 34 KiB). */
const LABEL_BYTES = 64 * 1024;

/**
 * How much of a streamed image (decoded; a qcow2's container) the sinks hold back for this check before the
 * disk changes: the table and the first partitions' labels (they usually start at 1 MiB), and a qcow2's
 * first tables and clusters. Small against the RAM an image write uses anyway.
 */
export const ROOM_HEAD_BYTES = 4 * 1024 * 1024;

/** A partition's label as blkid reports it (null: no filesystem), or why it is not known. */
type Label = { label: string | null } | 'unrecognised' | 'unseen';

async function bytesAt(view: ImageView, offset: number, length: number): Promise<Buffer | null> {
  if (offset + length <= view.head.length) return view.head.subarray(offset, offset + length);
  return view.read ? view.read(offset, length) : null;
}

function largestRegions(slots: readonly Slot[], sectorSize: number, firstUsable: number, lastUsable: number): Region[] {
  const used = slots
    .map((s) => ({ first: s.start / sectorSize, last: (s.start + s.size) / sectorSize - 1 }))
    .sort((a, b) => a.first - b.first);
  const gaps: Region[] = [];
  let cursor = firstUsable;
  for (const u of used) {
    if (u.first > cursor) gaps.push({ first: cursor, last: u.first - 1 });
    cursor = Math.max(cursor, u.last + 1);
  }
  if (lastUsable >= cursor) gaps.push({ first: cursor, last: lastUsable });
  const most = Math.max(0, ...gaps.map((g) => g.last - g.first + 1));
  return gaps.filter((g) => g.last - g.first + 1 === most);
}

function noRoom(diskPath: string, regions: readonly Region[], sectorSize: number): string | null {
  if (regions.some((r) => tailPlacement(r, CONFIG_DRIVE_PARTITION_BYTES, sectorSize))) return null;
  const free = regions.length ? (regions[0]!.last - regions[0]!.first + 1) * sectorSize : 0;
  return `no room for a ${CONFIG_DRIVE_PARTITION_BYTES / MiB} MiB config drive partition on ${diskPath} after the image: its largest free region holds ${(free / MiB).toFixed(1)} MiB`;
}

/** The GPT, null when there is none, 'unseen' when its header or entries lie beyond what can be read. */
async function readGpt(view: ImageView, disk: SinkTarget): Promise<Table | null | 'unseen' | 'none'> {
  const ss = disk.logicalSectorSize;
  const header = await bytesAt(view, ss, 92);
  if (!header) return 'unseen';
  if (header.toString('latin1', 0, 8) !== 'EFI PART') return 'none';
  const firstUsable = Number(header.readBigUInt64LE(40));
  const entriesLba = Number(header.readBigUInt64LE(72));
  const count = header.readUInt32LE(80);
  const entrySize = header.readUInt32LE(84);
  // Linux reads only 128-byte entries; any other size would also make the read below as large as the header says.
  if (entrySize !== 128 || count > 4096) return null;
  const entries = await bytesAt(view, entriesLba * ss, count * entrySize);
  if (!entries) return 'unseen';
  const slots: Slot[] = [];
  for (let i = 0; i < count; i++) {
    const e = entries.subarray(i * entrySize, (i + 1) * entrySize);
    if (e.subarray(0, 16).every((b) => b === 0)) continue;
    const first = Number(e.readBigUInt64LE(32));
    const last = Number(e.readBigUInt64LE(40));
    slots.push({ number: i + 1, start: first * ss, size: (last - first + 1) * ss });
  }
  // Where the image step puts the backup table: at the real end of the disk.
  const lastLba = Math.floor(disk.size / ss) - 1;
  const lastUsable = lastLba - Math.ceil((count * entrySize) / ss) - 1;
  return {
    kind: 'gpt',
    slots,
    noNewPartition: noRoom(disk.path, largestRegions(slots, ss, firstUsable, lastUsable), ss),
  };
}

function readMbr(head: Buffer, disk: SinkTarget): Table | null {
  if (head.length < 512 || head[510] !== 0x55 || head[511] !== 0xaa) return null;
  const ss = disk.logicalSectorSize;
  const slots: Slot[] = [];
  for (let i = 0; i < 4; i++) {
    const at = 446 + 16 * i;
    if (head[at + 4] === 0) continue;
    // A protective entry: a GPT for another sector size, which the table check after writing refuses.
    if (head[at + 4] === 0xee) return null;
    slots.push({ number: i + 1, start: head.readUInt32LE(at + 8) * ss, size: head.readUInt32LE(at + 12) * ss });
  }
  if (slots.length === 0) return null;
  if (slots.length >= 4) {
    return {
      kind: 'mbr',
      slots,
      noNewPartition: `the image uses MBR partitioning and already has ${slots.length} primary partitions`,
    };
  }
  const region = mbrTailRegion(
    slots.map((s) => ({ ...s, uuid: '', type: '' })),
    disk.size,
    ss,
  );
  return { kind: 'mbr', slots, noNewPartition: noRoom(disk.path, [region], ss) };
}

/** A filesystem's label as blkid reports it: null when there is no filesystem it could be read from. */
function fsLabel(bytes: Buffer): Label {
  const drive = identifyDrive(bytes);
  if (drive) return { label: drive.label };
  if (bytes.length < 4096) return 'unrecognised';
  const text = (from: number, to: number) => ({ label: bytes.toString('latin1', from, to).replace(/\0.*$/s, '') });
  if (bytes.readUInt16LE(1080) === 0xef53) return text(1144, 1160);
  if (bytes.toString('latin1', 0, 4) === 'XFSB') return text(108, 120);
  if (bytes.toString('latin1', 4086, 4096) === 'SWAPSPACE2') return text(1052, 1068);
  if (bytes.every((b) => b === 0)) return { label: null };
  return 'unrecognised';
}

/**
 * Why the config drive could not be written after this image; null when it could (or the write would not tell
 * either); undefined when the answer needs bytes of the image that are not at hand.
 */
export async function configDriveRoomProblem(
  view: ImageView,
  disk: SinkTarget,
  driveBytes: number,
): Promise<string | null | undefined> {
  const gpt = await readGpt(view, disk);
  if (gpt === 'unseen') return undefined;
  const table = gpt === 'none' ? readMbr(view.head, disk) : gpt;
  if (!table) return view.head.length < 512 ? undefined : null;
  const seen: { slot: Slot; label: Label }[] = [];
  for (const slot of table.slots) {
    const bytes = await bytesAt(view, slot.start, Math.min(slot.size, LABEL_BYTES));
    seen.push({ slot, label: bytes ? fsLabel(bytes) : 'unseen' });
  }
  const labelled = seen
    .filter((s) => typeof s.label === 'object' && isConfigDriveLabel(s.label.label))
    .map((s) => s.slot);
  if (labelled.length > 1) {
    return `more than one partition of the image is labelled "config-2" (partitions ${labelled.map((s) => s.number).join(', ')})`;
  }
  if (labelled.length === 1) {
    const [slot] = labelled as [Slot];
    return slot.size < driveBytes
      ? `the config drive (${driveBytes} bytes) does not fit the image's config-2 partition ${slot.number} (${slot.size} bytes)`
      : null;
  }
  const maybe = (label: Label, fits: boolean) =>
    seen.filter((s) => s.label === label && s.slot.size >= driveBytes === fits);
  if (!table.noNewPartition) {
    // An unseen partition too small for the drive may be an old config-2, which the write would reuse and fail.
    return maybe('unseen', false).length > 0 ? undefined : null;
  }
  // One the drive fits whose filesystem is not recognised may be a config-2 the write would reuse.
  if (maybe('unrecognised', true).length > 0) return null;
  if (maybe('unseen', true).length > 0) return undefined;
  return `${table.noNewPartition}, and no partition of it is labelled "config-2"`;
}

/**
 * The target's precheck for a deploy that adds `drive`: refuses the image before the disk changes. A stream
 * whose head cannot tell goes the buffered way when `undecided.buffers` says the buffer takes its declared
 * size; otherwise it goes on streaming (logged), and the drive's room is judged after the write.
 */
export function configDriveRoomCheck(
  disk: SinkTarget,
  drive: ConfigDriveImage,
  undecided?: { buffers(bytes: number | undefined): Promise<boolean>; log: Logger },
): (view: ImageView) => Promise<void> {
  // A drive rebuilt as VFAT for larger sectors is sized to its partition; only an existing one must hold it as is.
  const ss = disk.logicalSectorSize;
  const driveBytes = drive.sectorSize < ss ? 0 : Math.ceil(drive.bytes.length / ss) * ss;
  return async (view) => {
    const problem = await configDriveRoomProblem(view, disk, driveBytes);
    if (problem === undefined && view.partial) {
      if (undecided && !(await undecided.buffers(view.totalBytes))) {
        undecided.log.warn(
          { device: disk.path, bytes: view.totalBytes ?? null },
          `whether the config drive fits on ${disk.path} cannot be told from the image's first ${ROOM_HEAD_BYTES} bytes, and the buffer cannot take the image: streaming it, the room is judged after the write`,
        );
        return;
      }
      throw new ImageWriteError(
        `whether the config drive fits on ${disk.path} depends on parts of the image beyond its first ${ROOM_HEAD_BYTES} bytes`,
        { needsBuffer: true },
      );
    }
    if (problem)
      throw new ConfigDriveError(
        `Config drive cannot be written to ${disk.path}: ${problem}; refused before writing the image`,
      );
  };
}
