// The image checksum, computed on a worker thread so that hashing overlaps the download and the disk
// writes instead of taking turns with them on the main thread (md5 on one core can be slower than the
// disk: docs/performance.md). The downloaded bytes are copied into a small ring of shared memory, and the worker
// hashes each slot in order, then hands it back; no chunk is cloned between the threads, so memory stays at
// SLOTS × SLOT_BYTES whatever the image size. A buffered image can instead be hashed from its file
// (`digestOfFile`), which the worker reads on its own while the main thread goes on.
import { Worker } from 'node:worker_threads';
import { CommandExecutionError } from '../errors.ts';

const SLOT_BYTES = 1024 * 1024;
const SLOTS = 4;

// Evaluated as the worker's script (CommonJS), so it survives bundling as one file.
const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const { createHash } = require('node:crypto');
const fs = require('node:fs');
const hash = createHash(workerData.algo);
const memory = new Uint8Array(workerData.memory);
function digestOfFile(path) {
  const fileHash = createHash(workerData.algo);
  const fd = fs.openSync(path, 'r');
  try {
    const view = memory.subarray(0, ${SLOT_BYTES});
    for (let n; (n = fs.readSync(fd, view, 0, view.length, null)) > 0; ) fileHash.update(view.subarray(0, n));
  } finally {
    fs.closeSync(fd);
  }
  return fileHash.digest('hex');
}
parentPort.on('message', (m) => {
  if (m.file !== undefined) {
    try {
      return parentPort.postMessage({ digest: digestOfFile(m.file) });
    } catch (err) {
      return parentPort.postMessage({ error: err.message });
    }
  }
  if (m.length === undefined) return parentPort.postMessage({ digest: hash.digest('hex') });
  hash.update(memory.subarray(m.slot * ${SLOT_BYTES}, m.slot * ${SLOT_BYTES} + m.length));
  parentPort.postMessage({ slot: m.slot });
});
`;

type Reply = { slot: number } | { digest: string } | { error: string };

export class HashWorker {
  private readonly memory = new SharedArrayBuffer(SLOTS * SLOT_BYTES);
  private readonly slots: Buffer[];
  private readonly busy: (Promise<void> | null)[] = new Array(SLOTS).fill(null);
  private readonly release: ((() => void) | null)[] = new Array(SLOTS).fill(null);
  private readonly worker: Worker;
  private pendingDigest: { resolve(hex: string): void; reject(err: Error): void } | null = null;
  private failure: Error | null = null;
  private current = 0;
  private fill = 0;

  constructor(algo: string) {
    this.slots = Array.from({ length: SLOTS }, (_, i) => Buffer.from(this.memory, i * SLOT_BYTES, SLOT_BYTES));
    this.worker = new Worker(WORKER_SOURCE, {
      eval: true,
      workerData: { algo, memory: this.memory },
      resourceLimits: { maxYoungGenerationSizeMb: 1, maxOldGenerationSizeMb: 8 },
    });
    this.worker.on('message', (reply: Reply) => {
      if ('digest' in reply) return this.pendingDigest?.resolve(reply.digest);
      if ('error' in reply) return this.fail(new Error(reply.error));
      this.release[reply.slot]?.();
    });
    this.worker.on('error', (err) => this.fail(err));
    this.worker.on('exit', (code) => this.fail(new Error(`the hashing thread exited with code ${code}`)));
  }

  private fail(err: Error): void {
    // Not a download error: downloading again would not help.
    this.failure ??= new CommandExecutionError(`hashing the image failed: ${err.message}`);
    for (const release of this.release) release?.();
    this.pendingDigest?.reject(this.failure);
  }

  /**
   * Adds downloaded bytes to the hash. The chunk may be reused once they are copied: at once when there is room
   * in the ring (no promise, no turn of the event loop per chunk), else when the returned promise resolves.
   */
  update(chunk: Buffer): Promise<void> | undefined {
    let at = 0;
    while (at < chunk.length) {
      if (this.fill === 0 && this.busy[this.current]) return this.updateLater(chunk.subarray(at));
      if (this.failure) throw this.failure;
      const n = chunk.copy(this.slots[this.current]!, this.fill, at);
      at += n;
      this.fill += n;
      if (this.fill === SLOT_BYTES) this.post();
    }
    return undefined;
  }

  private async updateLater(rest: Buffer): Promise<void> {
    await this.busy[this.current];
    await this.update(rest);
  }

  private post(): void {
    const slot = this.current;
    this.busy[slot] = new Promise((resolve) => {
      this.release[slot] = () => {
        this.release[slot] = null;
        this.busy[slot] = null;
        resolve();
      };
    });
    this.worker.postMessage({ slot, length: this.fill });
    this.current = (slot + 1) % SLOTS;
    this.fill = 0;
  }

  /** The hex digest of everything added. */
  async digest(): Promise<string> {
    if (this.fill > 0) this.post();
    return this.request({});
  }

  /** The hex digest of a whole file, read by the worker itself (into the first slot: not while `update` runs). */
  async digestOfFile(path: string): Promise<string> {
    return this.request({ file: path });
  }

  private async request(message: { file?: string }): Promise<string> {
    if (this.failure) throw this.failure;
    // The worker takes messages in order, so the digest comes after every slot is hashed.
    return new Promise<string>((resolve, reject) => {
      this.pendingDigest = { resolve, reject };
      this.worker.postMessage(message);
    });
  }

  /** Stops the thread; anything still waiting on it fails rather than waits forever. */
  async close(): Promise<void> {
    this.worker.removeAllListeners('exit');
    this.fail(new Error('the hashing thread was stopped'));
    await this.worker.terminate();
  }
}
