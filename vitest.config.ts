import { defineConfig } from 'vitest/config';

/**
 * Tests that need root: loop devices, device writes, blkio throttling, spawned agents on devices. Everything
 * else is the fast project (`npm run test:fast`): no root, no devices, seconds on a laptop; CORPORA, the qcow2
 * corpora read and fuzzed against qemu-img (no root, but half a minute of CPU), run with `npm test`. docs/testing.md.
 */
const CORPORA = ['test/qcow2-reader.test.ts', 'test/qcow2-fuzz.test.ts'];
const DEVICE = [
  'test/agent-crash-restart.test.ts',
  'test/burnin.test.ts',
  'test/device-guard-multipath.test.ts',
  'test/deploy-steps.test.ts',
  'test/device-guard.test.ts',
  'test/disk-bootloader.test.ts',
  'test/docs-operating-curl.test.ts',
  'test/disk-clean.test.ts',
  'test/disk-clean-protected.test.ts',
  'test/disk-config-drive-write.test.ts',
  'test/disk-erase-cancel.test.ts',
  'test/disk-erase-fallback.test.ts',
  'test/disk-erase-nvme.test.ts',
  'test/disk-erase-settings.test.ts',
  'test/disk-erase.test.ts',
  'test/disk-partition-uuids.test.ts',
  'test/disk-root-device.test.ts',
  'test/host-write-all.test.ts',
  'test/http-fin-backpressure.test.ts',
  'test/image-block-writer.test.ts',
  'test/image-deploy.test.ts',
  'test/image-device-decoder.test.ts',
  'test/image-faults.test.ts',
  'test/image-held-back.test.ts',
  'test/image-refusals.test.ts',
  'test/inspect-lldp.test.ts',
  'test/netconf-netns.test.ts',
  'test/udhcpc-script-netns.test.ts',
  'test/dhcpv6-netns.test.ts',
  'test/robust-body-limit.test.ts',
  'test/robust-buffers.test.ts',
  'test/qcow2-device.test.ts',
  'test/raid-steps.test.ts',
  'test/qcow2-hostile.test.ts',
  'test/robust-cancel.test.ts',
  'test/robust-configdrive-room.test.ts',
  'test/robust-kill.test.ts',
  'test/robust-kill-write-order.test.ts',
  'test/robust-prechecks.test.ts',
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
