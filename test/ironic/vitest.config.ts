// The Ironic conformance suite: a real Ironic (Debian's 21.4, started per file by
// scripts/ironic-standalone/start.sh) drives the agent as a host process. Files run one at a time:
// each attaches loop devices and runs Ironic + agent, and the 2-core machine is shared.
import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/ironic/**/*.test.ts'],
    globalSetup: ['test/ironic/support/global-setup.ts'],
    pool: 'forks',
    fileParallelism: false,
    maxWorkers: 1,
    testTimeout: 300_000,
    hookTimeout: 300_000,
    // phases are printed at the end; the default reporter would interleave them
    reporters: ['default'],
  },
});
