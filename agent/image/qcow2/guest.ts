// Reads bytes of the disk a qcow2 buffer file describes, in-process: for the checks made before the disk is
// touched that need the guest's partition table and filesystem labels (the config drive's room). Runs only
// on a file that passed inspection and extent.ts (no backing or data file, tables inside the file), with the
// streaming reader's own decoders (header.ts, entries.ts, inflate.ts).
import { open } from 'node:fs/promises';
import { l1Entry, l2Entry } from './entries.ts';
import { parseQcow2Header } from './header.ts';
import { inflateCluster } from './inflate.ts';
import { readAt } from './read-at.ts';

export interface Qcow2Guest {
  /** `length` bytes of the guest disk from `offset` (zeros past its end). */
  read(offset: number, length: number): Promise<Buffer>;
  close(): Promise<void>;
}

/**
 * The qcow2 `file` (`size` bytes) as its guest disk; throws InvalidImage (or needsBuffer) for what the decoders refuse.
 */
export async function openQcow2Guest(file: string, size: number): Promise<Qcow2Guest> {
  const fh = await open(file, 'r');
  try {
    const head = await readAt(fh, 0, 64 * 1024);
    const layout = parseQcow2Header(head, { deviceSize: Number.MAX_SAFE_INTEGER, declaredLength: size });
    const { clusterSize: cs, clusterBits, l2Entries, l2EntryBytes } = layout;
    const l1 = await readAt(fh, layout.l1Offset, layout.l1Entries * 8);

    async function cluster(index: number): Promise<Buffer> {
      const l1i = Math.floor(index / l2Entries);
      if (l1i >= layout.l1Entries) return Buffer.alloc(cs);
      const l2Offset = l1Entry(l1, l1i, cs);
      if (l2Offset === 0) return Buffer.alloc(cs);
      const entry = await readAt(fh, l2Offset + (index % l2Entries) * l2EntryBytes, l2EntryBytes);
      const m = l2Entry(entry, 0, clusterBits, l2EntryBytes);
      if (m.kind === 'zero') return Buffer.alloc(cs);
      if (m.kind === 'compressed')
        return inflateCluster(layout.compression, await readAt(fh, m.host, m.length), cs, index * cs).out;
      const data = Buffer.alloc(cs);
      (await readAt(fh, m.host, cs)).copy(data);
      if (m.subclusters !== null) {
        // With extended L2 entries, a subcluster not marked allocated reads as zeros.
        const sub = cs / 32;
        for (let i = 0; i < 32; i++) if (!((m.subclusters >>> i) & 1)) data.fill(0, i * sub, (i + 1) * sub);
      }
      return data;
    }

    return {
      async read(offset, length) {
        const out = Buffer.alloc(length);
        for (let at = offset; at < offset + length; ) {
          const data = await cluster(Math.floor(at / cs));
          const from = at % cs;
          const n = Math.min(cs - from, offset + length - at);
          data.copy(out, at - offset, from, from + n);
          at += n;
        }
        return out;
      },
      close: () => fh.close(),
    };
  } catch (err) {
    await fh.close();
    throw err;
  }
}
