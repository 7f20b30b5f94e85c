// Scenarios 1-4 and fast track "on": one node, one agent, one disk, driven through a full life by a
// real Ironic with [deploy]fast_track=true: clean, deploy (raw, sha256, config drive), undeploy,
// then qcow2 and legacy-md5 deploys.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanStepsRun } from './support/agent-history.ts';
import { dirtyDisk, firstNonZero } from './support/disk-checks.ts';
import { deploy, expectDeployed } from './support/deploy.ts';
import { buildRawImage, toQcow2, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, DISK_BYTES, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

const S = 'lifecycle';
let rig: Rig;
let raw: BuiltImage;
let qcow2: BuiltImage;
const chain = new StepChain();

beforeAll(async () => {
  rig = await phase(S, 'start Ironic + agent, enroll', () => createRig('ina-lifecycle'));
  raw = await buildRawImage(rig.dir, 'disk.raw');
  qcow2 = await toQcow2(rig.dir, raw, 'disk.qcow2');
});

afterAll(async () => {
  await rig?.close();
});

describe("a real Ironic drives the agent through a node's life (fast track on)", () => {
  it('1. manage -> provide: automated cleaning (erase_devices_metadata, erase_devices) wipes the disk', () =>
    chain.step('1', async () => {
      await dirtyDisk(rig.disk.path, DISK_BYTES);
      await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      const node = await phase(S, 'provide (automated clean)', () => rig.drive('provide', [], 'available'));
      expect(node.last_error).toBeNull();
      expect(await cleanStepsRun(rig)).toEqual(['erase_devices_metadata', 'erase_devices']);
      expect(
        await firstNonZero(rig.disk.path, DISK_BYTES),
        'offset of the first byte cleaning left non-zero',
      ).toBeNull();
      // fast track keeps the agent's URL across the end of cleaning
      expect(node.driver_internal_info.agent_url).toBeTruthy();
    }));

  it('2. deploy a raw whole-disk image (sha256, JSON config drive) -> active', () =>
    chain.step('2', async () => {
      const cd = await phase(S, 'deploy raw (sha256, config drive)', () => deploy(rig, raw, 'raw', 'sha256', 'raw'));
      await expectDeployed(rig, raw, cd);
    }));

  it('3. undeploy -> cleaning -> available, after the agent looked itself up again', () =>
    chain.step('3', async () => {
      const before = await rig.lookups();
      const node = await phase(S, 'undeploy (+ clean)', () => rig.drive('undeploy', [], 'available'));
      expect(node.last_error).toBeNull();
      expect(await rig.lookups(), 'lookups answered by Ironic after the simulated power-off').toBeGreaterThan(before);
      // a fresh history after the power cycle: only this cleaning's steps
      expect(await cleanStepsRun(rig)).toEqual(['erase_devices_metadata', 'erase_devices']);
      expect(
        await firstNonZero(rig.disk.path, DISK_BYTES),
        'offset of the first byte cleaning left non-zero',
      ).toBeNull();
    }));

  it('4a. deploy a qcow2 image -> active, converted onto the disk', () =>
    chain.step('4a', async () => {
      const cd = await phase(S, 'deploy qcow2', () => deploy(rig, qcow2, 'qcow2', 'sha256', 'qcow2'));
      await expectDeployed(rig, raw, cd);
      await phase(S, 'undeploy (+ clean)', () => rig.drive('undeploy', [], 'available'));
    }));

  it('4b. deploy with a legacy md5 image_checksum -> active', () =>
    chain.step('4b', async () => {
      const cd = await phase(S, 'deploy raw (md5)', () => deploy(rig, raw, 'raw', 'md5', 'md5'));
      await expectDeployed(rig, raw, cd);
    }));
});
