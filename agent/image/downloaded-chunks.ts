// Freeing a downloaded chunk as soon as its bytes are copied. Each chunk of an image body is a view of the socket
// read it arrived in, and V8 returns that memory only at its next young-generation collection: while an image
// streams, several MiB of spent reads wait for it, and they set the agent's peak memory (docs/runtime.md,
// "Memory on Node 24"), and freeing them costs less CPU than collecting them (docs/qcow2-streaming.md). The HTTP
// source marks the chunks it hands out; the stage that copies them away (the block writer, the qcow2 reader) frees
// each one when it is done with it. A stage that hands a chunk to something that keeps it after the call (a child's
// stdin, a decoder) must not free it.
//
// Only a chunk that is the whole of its memory is freed. A view that shares its memory with something else
// (the response's headers, bytes undici gives back to the socket, a chunked body's framing) is left to the
// collector, and so is any chunk the source did not mark.

import { ImageWriteError } from '../errors.ts';

const downloaded = new WeakSet<Buffer>();

/** Smaller memory is not worth the call (and a slice of Node's shared buffer pool never covers all of it anyway). */
const SMALLEST = 16 * 1024;

/** The HTTP source: `chunk` is handed to the data path and nobody else holds it. */
export function markDownloaded(chunk: Buffer): void {
  downloaded.add(chunk);
}

/**
 * Frees the memory of a chunk the source marked, if the chunk is all of it. The caller has copied the bytes and
 * is the chunk's last reader: a stage that keeps a chunk passes a copy on, never the chunk itself (image/peek.ts).
 */
export function freeDownloaded(chunk: Buffer): void {
  if (!downloaded.delete(chunk)) return;
  const memory = chunk.buffer;
  if (!(memory instanceof ArrayBuffer) || memory.resizable || memory.byteLength < SMALLEST) return;
  if (chunk.byteOffset !== 0 || chunk.byteLength !== memory.byteLength) return;
  // Detaching hands the memory back to the allocator now; the next socket read reuses it.
  memory.transfer(0);
}

/** A chunk (or a view of one) freed before `stage` used it reads as empty: fail rather than lose its bytes. */
export function assertNotFreed(bytes: Buffer, stage: string): void {
  if (bytes.buffer instanceof ArrayBuffer && bytes.buffer.detached)
    throw new ImageWriteError(`internal: a downloaded chunk was freed before ${stage} used it`);
}
