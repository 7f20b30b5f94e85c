// The config drive's room check reads the image's GPT as the kernel would: a header that asks for partition
// entries of another size than 128 bytes is a table Linux does not read, and its claim is not taken as the
// size of a read (4096 entries of 1 MiB would be 4 GiB read from the image into memory). What a stream's head
// cannot tell (a label beyond it) is left undecided, and the precheck sends such a stream the buffered way.
import { describe, expect, it } from 'vitest';
import { configDriveRoomCheck, configDriveRoomProblem } from '../../agent/configdrive/room.ts';
import { ConfigDriveError, ImageWriteError } from '../../agent/errors.ts';

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

  /** A head with one GPT partition from sector 2048 to `lastLba`, its first bytes beyond the head. */
  function onePartition(lastLba: number): Buffer {
    const head = gptHead(128, 128);
    const entry = 2 * 512;
    head.fill(1, entry, entry + 16);
    head.writeBigUInt64LE(2048n, entry + 32);
    head.writeBigUInt64LE(BigInt(lastLba), entry + 40);
    return head;
  }

  it('a stream whose only partition fills the disk and lies beyond the head: undecided, sent the buffered way', async () => {
    const view = { head: onePartition(1024 * 2048 - 34), partial: true };
    expect(await configDriveRoomProblem(view, disk, 64 * MiB)).toBeUndefined();
    const drive = { bytes: Buffer.alloc(MiB), sectorSize: 2048 } as Parameters<typeof configDriveRoomCheck>[1];
    const err = await configDriveRoomCheck(disk, drive)(view).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ImageWriteError);
    expect((err as ImageWriteError).needsBuffer).toBe(true);
  });

  it('a stream with room after its partition is decided from the head: the drive gets a new partition', async () => {
    const view = { head: onePartition(512 * 2048), partial: true };
    expect(await configDriveRoomProblem(view, disk, 64 * MiB)).toBeNull();
  });

  it('a stream with room, but an unseen partition smaller than the drive (maybe an old config-2): undecided', async () => {
    const view = { head: onePartition(2048 + 2047), partial: true };
    expect(await configDriveRoomProblem(view, disk, 2 * MiB)).toBeUndefined();
    expect(await configDriveRoomProblem(view, disk, MiB)).toBeNull();
  });

  it('an MBR of four primaries seen whole (zeros in each): refused as a ConfigDriveError', async () => {
    const head = Buffer.alloc(64 * 1024);
    head[510] = 0x55;
    head[511] = 0xaa;
    for (let i = 0; i < 4; i++) {
      const at = 446 + 16 * i;
      head[at + 4] = 0x83;
      head.writeUInt32LE(2048 + i * 20480, at + 8);
      head.writeUInt32LE(20480, at + 12);
    }
    const view = { head, read: async (_offset: number, length: number) => Buffer.alloc(length) };
    const drive = { bytes: Buffer.alloc(MiB), sectorSize: 2048 } as Parameters<typeof configDriveRoomCheck>[1];
    const err = await configDriveRoomCheck(disk, drive)(view).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(ConfigDriveError);
    expect((err as ConfigDriveError).details).toMatch(/already has 4 primary partitions/);
  });
});
