// A positional write that writes all it was given or throws. A block device can take fewer bytes than asked
// (at its end, or when interrupted); a single write() whose count is not looked at would leave the rest as it
// was and go on as if written: an erase pass, a signature wipe or a partition table half done.
import type { FileHandle } from 'node:fs/promises';

export async function writeAll(
  fh: FileHandle,
  data: Uint8Array,
  offset: number,
  length: number,
  position: number,
): Promise<void> {
  for (let done = 0; done < length; ) {
    const { bytesWritten } = await fh.write(data, offset + done, length - done, position + done);
    if (bytesWritten <= 0)
      throw new Error(`the device took no more bytes at ${position + done} (${length - done} left)`);
    done += bytesWritten;
  }
}
