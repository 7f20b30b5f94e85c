// Hashing on a worker thread, so that a slow digest (md5 runs at ~600 MiB/s on one core) does not take
// turns with the download and the disk writes on the main thread. Chunks are copied into 1 MiB batches
// and transferred; at most IN_FLIGHT bytes wait in the worker before `update` makes the caller wait.
import { Worker } from 'node:worker_threads';

const BATCH = 1024 * 1024;
const IN_FLIGHT = 16 * 1024 * 1024;

// Inline (not a separate module file) so that it also works in the single-file ramdisk bundle.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const hash = require('node:crypto').createHash(workerData.algo);
parentPort.on('message', (batch) => {
  if (batch === null) return parentPort.postMessage({ digest: hash.digest('hex') });
  hash.update(new Uint8Array(batch));
  parentPort.postMessage({ done: batch.byteLength });
});
`;

type Reply = { done: number } | { digest: string };

export class ThreadHash {
  private readonly worker: Worker;
  private batch = new Uint8Array(BATCH);
  private filled = 0;
  private inFlight = 0;
  private drained: (() => void) | null = null;
  private finished: { resolve(digest: string): void; reject(err: Error): void } | null = null;
  private failure: Error | null = null;

  constructor(algo: string) {
    this.worker = new Worker(WORKER_SOURCE, { eval: true, workerData: { algo } });
    this.worker.on('message', (reply: Reply) => {
      if ('digest' in reply) return this.finished?.resolve(reply.digest);
      this.inFlight -= reply.done;
      if (this.inFlight <= IN_FLIGHT / 2) this.drained?.();
    });
    this.worker.on('error', (err) => {
      this.failure = err;
      this.drained?.();
      this.finished?.reject(err);
    });
  }

  /** Resolves at once unless too much is still waiting to be hashed. */
  async update(chunk: Buffer): Promise<void> {
    let at = 0;
    while (at < chunk.length) {
      const n = Math.min(chunk.length - at, BATCH - this.filled);
      this.batch.set(chunk.subarray(at, at + n), this.filled);
      this.filled += n;
      at += n;
      if (this.filled === BATCH) this.send();
    }
    if (this.inFlight > IN_FLIGHT) await new Promise<void>((resolve) => (this.drained = resolve));
    this.drained = null;
    if (this.failure) throw this.failure;
  }

  private send(): void {
    const buffer = this.filled === BATCH ? this.batch.buffer : this.batch.buffer.slice(0, this.filled);
    this.inFlight += this.filled;
    this.worker.postMessage(buffer, [buffer]);
    this.batch = new Uint8Array(BATCH);
    this.filled = 0;
  }

  async digest(): Promise<string> {
    if (this.failure) throw this.failure;
    if (this.filled > 0) this.send();
    const digest = new Promise<string>((resolve, reject) => (this.finished = { resolve, reject }));
    this.worker.postMessage(null);
    try {
      return await digest;
    } finally {
      await this.close();
    }
  }

  async close(): Promise<void> {
    await this.worker.terminate();
  }
}
