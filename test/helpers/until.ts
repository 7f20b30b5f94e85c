// The tests' one poller, for what a test cannot be told about (a child process's progress, a VM booting, a
// socket the agent closes): it asks again until the answer is there. Time in the agent itself is virtual where it
// matters (test/helpers/virtual-clock.ts); `ms` only bounds how long a broken run hangs before it fails by name.

/**
 * Asks `probe` every `everyMs` until it answers something other than undefined or false, and returns that. A probe
 * that throws counts as "not yet" (a server still starting); after `ms` it fails naming `what` and the last error.
 */
export async function until<T>(
  what: string,
  probe: () => T | undefined | false | Promise<T | undefined | false>,
  ms = 20_000,
  everyMs = 20,
): Promise<T> {
  const deadline = Date.now() + ms;
  let lastError: unknown;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      lastError = err;
    }
    if (Date.now() > deadline) {
      const why = lastError === undefined ? '' : ` (last error: ${(lastError as Error).message ?? String(lastError)})`;
      throw new Error(`timed out after ${ms} ms waiting for ${what}${why}`);
    }
    await new Promise((resolve) => setTimeout(resolve, everyMs));
  }
}
