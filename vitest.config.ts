import { defineConfig } from 'vitest/config';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    exclude: ['test/ironic/**', 'test/e2e/**', 'node_modules/**'],
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Loop devices and disks are machine-wide; two workers keep the 2-core CI busy without thrashing.
    pool: 'forks',
    maxWorkers: 2,
  },
});
