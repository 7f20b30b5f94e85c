import { defineConfig } from 'vitest/config';

/**
 * Tests that need root: loop devices, device writes, blkio throttling, spawned agents on devices. Everything
 * else is the fast project (`npm run test:fast`): no root, no devices, seconds on a laptop; CORPORA, the qcow2
 * corpora read and fuzzed against qemu-img (no root, but half a minute of CPU), run with `npm test`. docs/testing.md.
 */
const CORPORA = ['test/image/qcow2/reader.corpora.test.ts', 'test/image/qcow2/fuzz.corpora.test.ts'];
const DEVICE = [
  'test/last-words.device.test.ts',
  'test/burnin/steps.device.test.ts',
  'test/safety/device-guard-multipath.device.test.ts',
  'test/steps/deploy-steps.device.test.ts',
  'test/safety/device-guard.device.test.ts',
  'test/disk/bootloader.device.test.ts',
  'test/project/docs-operating-curl.device.test.ts',
  'test/disk/clean.device.test.ts',
  'test/disk/clean-protected.device.test.ts',
  'test/configdrive/write.device.test.ts',
  'test/disk/erase-cancel.device.test.ts',
  'test/disk/erase-fallback.device.test.ts',
  'test/disk/nvme-erase.device.test.ts',
  'test/disk/erase-settings.device.test.ts',
  'test/disk/erase.device.test.ts',
  'test/disk/partition-uuids.device.test.ts',
  'test/disk/root-device.device.test.ts',
  'test/host/write-all.device.test.ts',
  'test/image/http-fin-backpressure.device.test.ts',
  'test/image/sinks/block-writer.device.test.ts',
  'test/image/deploy.device.test.ts',
  'test/image/sinks/device-decoder.device.test.ts',
  'test/image/download-faults.device.test.ts',
  'test/image/sinks/held-back.device.test.ts',
  'test/image/refusals.device.test.ts',
  'test/inspect/lldp.device.test.ts',
  'test/netconf/netns.device.test.ts',
  'test/image-build/udhcpc-script.device.test.ts',
  'test/image-build/dhcpv6.device.test.ts',
  'test/api/body-limit.device.test.ts',
  'test/image/buffer-files.device.test.ts',
  'test/image/qcow2/sink.device.test.ts',
  'test/steps/raid-steps.device.test.ts',
  'test/image/qcow2/hostile.device.test.ts',
  'test/commands/reset-cancel.device.test.ts',
  'test/configdrive/room.device.test.ts',
  'test/image/kill.device.test.ts',
  'test/image/kill-write-order.device.test.ts',
  'test/image/prechecks.device.test.ts',
];
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
        test: { name: 'fast', include: ['test/**/*.test.ts'], exclude: [...ELSEWHERE, ...DEVICE, ...CORPORA] },
      },
      { extends: true, test: { name: 'corpora', include: CORPORA } },
      { extends: true, test: { name: 'device', include: DEVICE } },
    ],
  },
});
