// Scenario 6, fast track off ([deploy]fast_track=false; lifecycle.test.ts runs with it on): Ironic
// refuses lookups until it "boots" the node, powers it off after cleaning (wiping the token), and the
// agent has to find out from a rejected heartbeat and look itself up again for the deploy.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy, expectDeployed } from './support/deploy.ts';
import { buildRawImage, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

const S = 'fast-track off';
let rig: Rig;
let raw: BuiltImage;
const chain = new StepChain();

beforeAll(async () => {
  rig = await phase(S, 'start Ironic + agent, enroll', () => createRig('ina-noft', { ironic: { fastTrack: false } }));
  raw = await buildRawImage(rig.dir, 'disk.raw');
});

afterAll(async () => {
  await rig?.close();
});

describe('with fast track off the agent follows Ironic through power cycles', () => {
  it('6a. manage -> provide: the agent is found only once cleaning boots the node -> available', () =>
    chain.step('6a', async () => {
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      expect(await rig.lookups(), 'Ironic answers no lookup before the node is being cleaned').toBe(0);
      const node = await phase(S, 'provide (automated clean)', () => rig.drive('provide', [], 'available'));
      expect(node.last_error).toBeNull();
      expect(await rig.lookups()).toBeGreaterThan(0);
      expect(
        node.driver_internal_info.agent_url,
        'cleaning ended with a power-off, which forgets the agent',
      ).toBeUndefined();
    }));

  it('6b. deploy -> active, after a fresh lookup', () =>
    chain.step('6b', async () => {
      const before = await rig.lookups();
      const cd = await phase(S, 'deploy raw (sha256, config drive)', () => deploy(rig, raw, 'raw', 'sha256', 'noft'));
      await expectDeployed(rig, raw, cd);
      expect(await rig.lookups()).toBeGreaterThan(before);
    }));
});
