// The config drive's room check reads the image's GPT as the kernel would: a header that asks for partition
// entries of another size than 128 bytes is a table Linux does not read, and its claim is not taken as the
// size of a read (4096 entries of 1 MiB would be 4 GiB read from the image into memory).
import { describe, expect, it } from 'vitest';
import { configDriveRoomProblem } from '../agent/configdrive/room.ts';

const MiB = 1024 * 1024;

/** An image head holding a protective MBR and a GPT header that declares `count` entries of `entrySize`. */
function gptHead(count: number, entrySize: number): Buffer {
  const head = Buffer.alloc(64 * 1024);
  head[510] = 0x55;
  head[511] = 0xaa;
  head[446 + 4] = 0xee;
  head.write('EFI PART', 512, 'latin1');
  head.writeBigUInt64LE(34n, 512 + 40);
  head.writeBigUInt64LE(2n, 512 + 72);
  head.writeUInt32LE(count, 512 + 80);
  head.writeUInt32LE(entrySize, 512 + 84);
  return head;
}

describe('config drive room: the GPT as Linux reads it', () => {
  const disk = { path: '/dev/fake', size: 1024 * MiB, logicalSectorSize: 512 };

  it('does not read what a header declaring 1 MiB entries asks for', async () => {
    const reads: number[] = [];
    const view = {
      head: gptHead(4096, MiB),
      read: async (_offset: number, length: number) => {
        reads.push(length);
        return Buffer.alloc(0);
      },
    };
    expect(await configDriveRoomProblem(view, disk, 64 * MiB)).toBeNull();
    expect(reads.filter((n) => n > 512 * 1024)).toEqual([]);
  });

  it('reads a table of 128-byte entries (one partition filling the disk: no room)', async () => {
    const head = gptHead(128, 128);
    const entry = 2 * 512;
    head.fill(1, entry, entry + 16);
    head.writeBigUInt64LE(2048n, entry + 32);
    head.writeBigUInt64LE(BigInt(1024 * 2048 - 34), entry + 40);
    // The partition's first bytes: zeros, no filesystem (a label that is known to be none).
    const view = { head, read: async (_offset: number, length: number) => Buffer.alloc(length) };
    expect(await configDriveRoomProblem(view, disk, 64 * MiB)).toMatch(/^no room for a 64 MiB config drive partition/);
  });
});
