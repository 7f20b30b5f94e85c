// Positioned reads of a file the image checks look into (the buffer file, a qcow2's tables and clusters).
import type { FileHandle } from 'node:fs/promises';

/** Up to `length` bytes from `offset`; fewer past the end of the file. */
export async function readAt(fh: FileHandle, offset: number, length: number): Promise<Buffer> {
  const buf = Buffer.alloc(length);
  const { bytesRead } = await fh.read(buf, 0, length, offset);
  return buf.subarray(0, bytesRead);
}
