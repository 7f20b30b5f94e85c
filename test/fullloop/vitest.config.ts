import { defineConfig } from 'vitest/config';

// The full loop: real Ironic 21.4 driving a QEMU machine through an IPMI BMC. Run by scripts/fullloop/run.sh
// inside its own network namespace, never directly: one scenario at a time.
export default defineConfig({
  test: {
    include: ['test/fullloop/**/*.test.ts'],
    testTimeout: 1_800_000,
    hookTimeout: 300_000,
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
  },
});
