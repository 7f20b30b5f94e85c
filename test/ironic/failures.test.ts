// Scenario 7: deploys that must fail. A wrong checksum and a qcow2 with a backing file each end in
// "deploy failed" with the agent's error text in last_error, and leave no image on the disk that
// looks deployed. Between the two, undeploy cleans the node back to available.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { partitionTable } from './support/disk-checks.ts';
import { instanceInfoArgs, configDriveFor } from './support/deploy.ts';
import { buildRawImage, qcow2WithBackingFile, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';
import { waitForState } from './support/wait-state.ts';

const S = 'failures';
let rig: Rig;
let raw: BuiltImage;
let backed: BuiltImage;
const chain = new StepChain();

beforeAll(async () => {
  rig = await phase(S, 'start Ironic + agent, enroll', () =>
    createRig('ina-failures', {
      // a checksum mismatch downloads the image a second time: keep the retries few and quick
      agentFlags: { 'ipa-image-download-connection-retries': '1', 'ipa-image-download-connection-retry-interval': '0' },
    }),
  );
  raw = await buildRawImage(rig.dir, 'disk.raw');
  backed = await qcow2WithBackingFile(rig.dir, raw, 'backed.qcow2');
});

afterAll(async () => {
  await rig?.close();
});

async function failingDeploy(
  image: BuiltImage,
  format: 'raw' | 'qcow2',
  checksum: 'sha256' | 'wrong-sha256',
  tag: string,
) {
  await rig.bm.run(['node', 'set', rig.uuid, ...instanceInfoArgs(rig, image, format, checksum)]);
  await rig.bm.run(['node', 'deploy', rig.uuid, '--config-drive', JSON.stringify(configDriveFor(rig.uuid, tag))]);
  return waitForState(rig.bm, rig.uuid, 'deploy failed', { explain: rig.explain });
}

async function expectNoDeployedImage(): Promise<void> {
  const table = await partitionTable(rig.disk.path);
  expect(
    table.label,
    `partition table left on ${rig.disk.path} after a failed deploy: ${JSON.stringify(table)}`,
  ).toBeNull();
}

describe('failed deploys end in "deploy failed" with the agent\'s error and no usable image', () => {
  it('7a. the node is cleaned and available', () =>
    chain.step('7a', async () => {
      await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      await phase(S, 'provide (automated clean)', () => rig.drive('provide', [], 'available'));
    }));

  it('7b. a wrong sha256 -> deploy failed, with the checksum error in last_error', () =>
    chain.step('7b', async () => {
      const node = await phase(S, 'deploy with a wrong checksum', () =>
        failingDeploy(raw, 'raw', 'wrong-sha256', 'badsum'),
      );
      expect(node.last_error).toMatch(/Image failed to verify against checksum/);
      expect(node.last_error).toContain('f'.repeat(64));
      await expectNoDeployedImage();
    }));

  it('7c. undeploy from deploy failed -> cleaning -> available', () =>
    chain.step('7c', async () => {
      const node = await phase(S, 'undeploy (+ clean)', () => rig.drive('undeploy', [], 'available'));
      expect(node.last_error).toBeNull();
    }));

  it('7d. a qcow2 with a backing file -> deploy failed, refused by the safety check', () =>
    chain.step('7d', async () => {
      const node = await phase(S, 'deploy a qcow2 with a backing file', () =>
        failingDeploy(backed, 'qcow2', 'sha256', 'backed'),
      );
      expect(node.last_error).toMatch(/Security: Image failed safety check/);
      await expectNoDeployedImage();
    }));
});
