import { defineConfig } from 'vitest/config';

// The QEMU end-to-end suite: boots the built ramdisk (setup.ts builds it first) in one VM at a time.
export default defineConfig({
  test: {
    include: ['test/e2e/**/*.test.ts'],
    globalSetup: ['test/e2e/setup.ts'],
    testTimeout: 600_000,
    hookTimeout: 120_000,
    pool: 'forks',
    maxWorkers: 1,
    fileParallelism: false,
  },
});
