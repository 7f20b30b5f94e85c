// Reads bytes of the disk a qcow2 buffer file describes, in-process: for the checks made before the disk is
// touched that need the guest's partition table and filesystem labels (the config drive's room). Runs only
// on a file that passed inspection and extent.ts (no backing or data file, tables inside the file), with the
// streaming reader's own decoders (header.ts, entries.ts, inflate.ts).
import { open } from 'node:fs/promises';
import { l1Entry, l2Entry } from './entries.ts';
import { parseQcow2Header } from './header.ts';
import { inflateCluster } from './inflate.ts';
import { readAt } from './read-at.ts';
import { INSPECT_HEAD_BYTES } from '../inspect.ts';
import type { ImageView } from '../sinks/sink.ts';

export interface Qcow2Guest {
  /** `length` bytes of the guest disk from `offset` (zeros past its end). */
  read(offset: number, length: number): Promise<Buffer>;
  close(): Promise<void>;
}

/** Reads `length` bytes of the qcow2 file from `offset`; null where they are not at hand (a stream's prefix). */
export type ReadQcow2 = (offset: number, length: number) => Promise<Buffer | null>;

/**
 * The guest disk of the qcow2 whose first bytes are `head`, read through `readFile`: null wherever a table or a
 * cluster it needs is not at hand. Throws InvalidImage (or needsBuffer) for what the decoders refuse.
 */
export async function qcow2GuestReader(
  head: Buffer,
  readFile: ReadQcow2,
  declaredLength?: number,
): Promise<(offset: number, length: number) => Promise<Buffer | null>> {
  const layout = parseQcow2Header(head, { deviceSize: Number.MAX_SAFE_INTEGER, declaredLength });
  const { clusterSize: cs, clusterBits, l2Entries, l2EntryBytes } = layout;
  const l1 = await readFile(layout.l1Offset, layout.l1Entries * 8);

  async function cluster(index: number): Promise<Buffer | null> {
    const l1i = Math.floor(index / l2Entries);
    if (l1i >= layout.l1Entries) return Buffer.alloc(cs);
    if (!l1 || l1.length < (l1i + 1) * 8) return null;
    const l2Offset = l1Entry(l1, l1i, cs);
    if (l2Offset === 0) return Buffer.alloc(cs);
    const entry = await readFile(l2Offset + (index % l2Entries) * l2EntryBytes, l2EntryBytes);
    if (!entry || entry.length < l2EntryBytes) return null;
    const m = l2Entry(entry, 0, clusterBits, l2EntryBytes);
    if (m.kind === 'zero') return Buffer.alloc(cs);
    if (m.kind === 'compressed') {
      const packed = await readFile(m.host, m.length);
      return packed ? inflateCluster(layout.compression, packed, cs, index * cs).out : null;
    }
    const stored = await readFile(m.host, cs);
    if (!stored) return null;
    const data = Buffer.alloc(cs);
    stored.copy(data);
    if (m.subclusters !== null) {
      // With extended L2 entries, a subcluster not marked allocated reads as zeros.
      const sub = cs / 32;
      for (let i = 0; i < 32; i++) if (!((m.subclusters >>> i) & 1)) data.fill(0, i * sub, (i + 1) * sub);
    }
    return data;
  }

  return async (offset, length) => {
    const out = Buffer.alloc(length);
    for (let at = offset; at < offset + length; ) {
      const data = await cluster(Math.floor(at / cs));
      if (!data) return null;
      const from = at % cs;
      const n = Math.min(cs - from, offset + length - at);
      data.copy(out, at - offset, from, from + n);
      at += n;
    }
    return out;
  };
}

/**
 * The qcow2 `file` (`size` bytes) as its guest disk; throws InvalidImage (or needsBuffer) for what the decoders refuse.
 */
export async function openQcow2Guest(file: string, size: number): Promise<Qcow2Guest> {
  const fh = await open(file, 'r');
  try {
    const head = await readAt(fh, 0, 64 * 1024);
    const read = await qcow2GuestReader(head, (offset, length) => readAt(fh, offset, length), size);
    return {
      async read(offset, length) {
        return (await read(offset, length)) ?? Buffer.alloc(length);
      },
      close: () => fh.close(),
    };
  } catch (err) {
    await fh.close();
    throw err;
  }
}

/**
 * The guest disk as far as the first bytes of a streamed qcow2 (`prefix`) describe it, for the checks made before
 * the disk changes; `whole` says the prefix is the whole image. Null where a decoder refuses what it read.
 */
export async function qcow2PrefixView(prefix: Buffer, whole: boolean, declaredLength?: number): Promise<ImageView> {
  const readPrefix: ReadQcow2 = async (offset, length) =>
    whole || offset + length <= prefix.length ? prefix.subarray(offset, offset + length) : null;
  try {
    const read = await qcow2GuestReader(prefix, readPrefix, declaredLength);
    const head = await read(0, INSPECT_HEAD_BYTES);
    return {
      head: head ?? Buffer.alloc(0),
      read: (offset, length) => read(offset, length).catch(() => null),
      partial: true,
    };
  } catch {
    // What the decoders refuse here the streaming reader refuses too; the check is left unable to tell.
    return { head: Buffer.alloc(0), partial: true };
  }
}
