// The one lock primitive: first come, first served, one holder at a time. The command executor holds it
// while it checks and starts a command; the API holds one per app while it reads a large request body.

export class FifoLock {
  private tail: Promise<void> = Promise.resolve();

  /** Runs `fn` once every earlier holder has finished, and lets the next one in when it settles either way. */
  async hold<T>(fn: () => Promise<T>): Promise<T> {
    const previous = this.tail;
    let release!: () => void;
    this.tail = new Promise((resolve) => (release = resolve));
    await previous;
    try {
      return await fn();
    } finally {
      release();
    }
  }
}
