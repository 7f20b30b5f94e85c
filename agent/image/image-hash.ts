// The image checksum, computed on libuv's thread pool by a small addon (hash-addon.c, built by
// scripts/build-addon.sh and shipped next to the agent's bundle) so that hashing overlaps the download and the
// disk writes instead of taking turns with them on the main thread (md5 on one core can be slower than the disk:
// docs/performance.md). A worker thread did this before, at the cost of a second V8 isolate (docs/decisions.md).
// The downloaded bytes are copied into a small ring, and each full slot is hashed in order by one job at a time,
// then handed back, so memory stays at SLOTS × SLOT_BYTES whatever the image size. A buffered image can instead
// be hashed from its file (`digestOfFile`), read on the thread pool while the main thread goes on.
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';
import { CommandExecutionError } from '../errors.ts';

// Two slots: one hashed while the other fills. Smaller slots mean more jobs, each waking the main thread, and
// cost time; more slots cost memory and bought no time (docs/runtime.md, "Memory on Node 24").
const SLOT_BYTES = 1024 * 1024;
const SLOTS = 2;

type Native = { readonly brand: unique symbol };
type Done = (error: Error | null, digest?: string) => void;
interface Addon {
  create(algo: string): Native;
  update(hasher: Native, buffer: Buffer, length: number, done: Done): void;
  digestFile(hasher: Native, path: string, done: Done): void;
  digest(hasher: Native): string;
  stop(hasher: Native): void;
}

const ADDON_URL = new URL('./hash-addon.node', import.meta.url);
let addon: Addon | undefined;

/**
 * Loads the addon once. `main.ts` calls it at start, so that an agent without its addon (a source tree where
 * scripts/build-addon.sh never ran) refuses to start instead of failing every deploy later.
 */
export function loadHashAddon(): Addon {
  if (addon) return addon;
  try {
    addon = createRequire(import.meta.url)(fileURLToPath(ADDON_URL)) as Addon;
    return addon;
  } catch (err) {
    throw new CommandExecutionError(
      `the hashing addon ${fileURLToPath(ADDON_URL)} cannot be loaded (scripts/build-addon.sh builds it): ${(err as Error).message}`,
    );
  }
}

function failed(err: unknown): CommandExecutionError {
  // Not a download error: downloading again would not help.
  return err instanceof CommandExecutionError
    ? err
    : new CommandExecutionError(`hashing the image failed: ${(err as Error).message}`);
}

export class ImageHash {
  private readonly addon = loadHashAddon();
  private readonly native: Native;
  private readonly ring = Buffer.allocUnsafeSlow(SLOTS * SLOT_BYTES);
  private readonly slots = Array.from({ length: SLOTS }, (_, i) =>
    this.ring.subarray(i * SLOT_BYTES, (i + 1) * SLOT_BYTES),
  );
  private readonly lengths: number[] = new Array(SLOTS).fill(0);
  private readonly busy: (Promise<void> | null)[] = new Array(SLOTS).fill(null);
  private readonly release: ((() => void) | null)[] = new Array(SLOTS).fill(null);
  private readonly fileHashers = new Set<Native>();
  private failure: CommandExecutionError | null = null;
  private current = 0;
  private fill = 0;
  // Full slots wait from `queued` on, in ring order; one job at a time hashes every one of them that is
  // contiguous in the ring, so the thread pool is not left idle while the main thread is busy elsewhere.
  private queued = 0;
  private waiting = 0;
  private running = false;
  private digested = false;
  private readonly idle: (() => void)[] = [];

  constructor(private readonly algo: string) {
    try {
      this.native = this.addon.create(algo);
    } catch (err) {
      throw failed(err);
    }
  }

  /**
   * Adds downloaded bytes to the hash. The chunk may be reused once they are copied: at once when there is room
   * in the ring (no promise, no turn of the event loop per chunk), else when the returned promise resolves.
   */
  update(chunk: Buffer): Promise<void> | undefined {
    if (this.digested) throw new CommandExecutionError('hashing the image failed: bytes came after its digest');
    let at = 0;
    while (at < chunk.length) {
      if (this.failure) throw this.failure;
      if (this.fill === 0 && this.busy[this.current]) return this.updateLater(chunk.subarray(at));
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
    this.lengths[slot] = this.fill;
    this.busy[slot] = new Promise((resolve) => {
      this.release[slot] = resolve;
    });
    this.waiting++;
    this.current = (slot + 1) % SLOTS;
    this.fill = 0;
    this.pump();
  }

  private pump(): void {
    if (this.running) return;
    if (this.waiting === 0 || this.failure) {
      // After a failure nothing is hashed again: every slot is let go, so no copy waits for one forever.
      if (this.failure) for (let slot = 0; slot < SLOTS; slot++) this.free(slot);
      for (const wake of this.idle.splice(0)) wake();
      return;
    }
    const first = this.queued;
    const count = Math.min(this.waiting, SLOTS - first);
    let bytes = 0;
    for (let i = first; i < first + count; i++) bytes += this.lengths[i]!;
    try {
      this.addon.update(this.native, this.ring.subarray(first * SLOT_BYTES), bytes, (err) => {
        this.running = false;
        if (err) this.failure ??= failed(err);
        for (let i = first; i < first + count; i++) this.free(i);
        this.waiting -= count;
        this.queued = (first + count) % SLOTS;
        this.pump();
      });
      this.running = true;
    } catch (err) {
      this.failure ??= failed(err);
      this.pump();
    }
  }

  private free(slot: number): void {
    const release = this.release[slot];
    this.release[slot] = null;
    this.busy[slot] = null;
    release?.();
  }

  /** The hex digest of everything added. */
  async digest(): Promise<string> {
    if (this.failure) throw this.failure;
    if (this.digested) throw new CommandExecutionError('hashing the image failed: its digest was already taken');
    this.digested = true;
    if (this.fill > 0) this.post();
    await this.settled();
    if (this.failure) throw this.failure;
    try {
      return this.addon.digest(this.native);
    } catch (err) {
      throw failed(err);
    }
  }

  /** The hex digest of a whole file, read on the thread pool (a hash of its own, whatever `update` added). */
  async digestOfFile(path: string): Promise<string> {
    if (this.failure) throw this.failure;
    let hasher: Native;
    try {
      hasher = this.addon.create(this.algo);
    } catch (err) {
      throw failed(err);
    }
    this.fileHashers.add(hasher);
    try {
      return await new Promise<string>((resolve, reject) => {
        this.addon.digestFile(hasher, path, (err, digest) => (err ? reject(failed(err)) : resolve(digest!)));
      });
    } catch (err) {
      throw failed(err);
    } finally {
      this.fileHashers.delete(hasher);
    }
  }

  /** Stops: a file being read stops at its next block, and any later use fails rather than waits. */
  async close(): Promise<void> {
    this.failure ??= new CommandExecutionError('hashing the image failed: the hash was stopped');
    for (const hasher of this.fileHashers) this.addon.stop(hasher);
    await this.settled();
    for (let slot = 0; slot < SLOTS; slot++) this.free(slot);
  }

  /** Resolves once no job runs and none waits (or the hash failed, so none will run). */
  private settled(): Promise<void> {
    if (!this.running && (this.waiting === 0 || this.failure)) return Promise.resolve();
    return new Promise((resolve) => this.idle.push(resolve));
  }
}
