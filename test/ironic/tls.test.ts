// Scenario 5: Ironic with [agent]require_tls=true (split API + conductor over JSON-RPC). The agent serves
// HTTPS with its auto-generated certificate, sends it in the heartbeat, and Ironic verifies every
// command against it while it cleans and deploys.
import { existsSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { deploy, expectDeployed } from './support/deploy.ts';
import { buildRawImage, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

const S = 'tls';
let rig: Rig;
let raw: BuiltImage;
const chain = new StepChain();

beforeAll(async () => {
  rig = await phase(S, 'start Ironic (split) + agent, enroll', () =>
    createRig('ina-tls', { ironic: { mode: 'split', requireTls: true }, autoTls: true }),
  );
  raw = await buildRawImage(rig.dir, 'disk.raw');
});

afterAll(async () => {
  await rig?.close();
});

describe('with [agent]require_tls=true the agent is reached over HTTPS with its auto-TLS certificate', () => {
  it('5a. heartbeats an https callback_url with a certificate Ironic stores', () =>
    chain.step('5a', async () => {
      const node = await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
      expect(node.driver_internal_info.agent_url).toBe(`https://127.0.0.1:${rig.agent.port}`);
      const ca = node.driver_internal_info.agent_verify_ca;
      expect(
        typeof ca === 'string' && existsSync(ca),
        `agent_verify_ca (${String(ca)}) is a stored certificate file`,
      ).toBe(true);
    }));

  it('5b. manage -> provide (automated cleaning over HTTPS) -> available', () =>
    chain.step('5b', async () => {
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      const node = await phase(S, 'provide (automated clean)', () => rig.drive('provide', [], 'available'));
      expect(node.last_error).toBeNull();
    }));

  it('5c. deploy a raw image with a config drive over HTTPS -> active', () =>
    chain.step('5c', async () => {
      const cd = await phase(S, 'deploy raw (sha256, config drive)', () => deploy(rig, raw, 'raw', 'sha256', 'tls'));
      await expectDeployed(rig, raw, cd);
    }));
});
