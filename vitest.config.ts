import { defineConfig } from 'vitest/config';

/**
 * A test file's name says its project (docs/testing.md): `*.device.test.ts` needs root (loop devices, device
 * writes, network namespaces, blkio throttling, spawned agents on devices); `*.corpora.test.ts` is the slow qcow2
 * corpora read and fuzzed against qemu-img (no root, but half a minute of CPU); every other test under test/ is
 * `fast` (`npm run test:fast`: no root, no devices). `npm test` runs all three. The suites with their own
 * configuration (a real Ironic, QEMU) stay out of all three.
 */
const DEVICE = 'test/**/*.device.test.ts';
const CORPORA = 'test/**/*.corpora.test.ts';
const ELSEWHERE = ['test/ironic/**', 'test/e2e/**', 'test/fullloop/**', 'node_modules/**'];

export default defineConfig({
  test: {
    testTimeout: 60_000,
    hookTimeout: 60_000,
    // Loop devices and disks are machine-wide; two workers keep the 2-core CI busy without thrashing.
    pool: 'forks',
    maxWorkers: 2,
    reporters: ['default', './test/helpers/start-reporter.ts'],
    projects: [
      {
        extends: true,
        test: { name: 'fast', include: ['test/**/*.test.ts'], exclude: [...ELSEWHERE, DEVICE, CORPORA] },
      },
      { extends: true, test: { name: 'corpora', include: [CORPORA], exclude: ELSEWHERE } },
      { extends: true, test: { name: 'device', include: [DEVICE], exclude: ELSEWHERE } },
    ],
  },
});
