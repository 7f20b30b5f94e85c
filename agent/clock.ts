// Time as the agent's retry loops see it. Image transfers, lookup backoff and the heartbeat schedule read
// the clock and sleep through this one interface, so tests can run them on virtual time.

export interface Clock {
  /** Milliseconds, wall-clock style (IPA's heartbeat is a wall-clock design). */
  now(): number;
  /** Resolves after `ms`, or early (never rejecting) when `signal` aborts. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
  /** A signal that aborts once `ms` have passed on this clock (an overall deadline over requests in flight). */
  timeout(ms: number): AbortSignal;
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
  timeout: (ms) => AbortSignal.timeout(Math.max(1, ms)),
};
