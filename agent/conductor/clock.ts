// Time as the conductor link sees it. Lookup backoff and the heartbeat schedule read the clock and
// sleep through this one interface, so tests can run them on virtual time.

export interface Clock {
  /** Milliseconds, wall-clock style (IPA's heartbeat is a wall-clock design). */
  now(): number;
  /** Resolves after `ms`, or early (never rejecting) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export const realClock: Clock = {
  now: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve) => {
      if (signal?.aborted) return resolve();
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener('abort', done);
        resolve();
      };
      const timer = setTimeout(done, Math.max(0, ms));
      signal?.addEventListener('abort', done, { once: true });
    }),
};
