// An operator's own steps, driven by a real conductor: the agent starts with a plugin folder the test writes (an
// executable-steps manifest and its shell scripts), and Ironic
// - runs a plugin clean step with args in a manual clean,
// - runs a plugin deploy step from a deploy template during a `direct` deploy (after write_image),
// - deploys with the `custom-agent` interface, where a plugin step alone writes the image onto the disk the agent
//   chose through its guard (INA_ROOT_DEVICE), and the node reaches `active`.
// One conductor, one agent. The custom-agent part needs the conductor configured for it (sid: extra conf).
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { cleanStepsRun } from './support/agent-history.ts';
import { configDriveFor, instanceInfoArgs } from './support/deploy.ts';
import { imagePayloadOnDisk } from './support/disk-checks.ts';
import { buildRawImage, type BuiltImage } from './support/images.ts';
import { ironicKind } from './support/ironic.ts';
import { phase } from './support/phase.ts';
import { createRig, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

const S = 'custom-steps';
const SID = ironicKind() === 'sid';
if (!SID)
  console.warn(
    'custom-steps.test.ts P3 skipped: the custom-agent deploy interface needs the conductor configured for it, which the sid suite does (INA_IRONIC=sid)',
  );
const TRAIT = 'CUSTOM_INA_SITE_STEP';
let rig: Rig;
let raw: BuiltImage;
let plugins: string;
let out: string;
const chain = new StepChain();

/** A top-level string field of a flat JSON object, in sh (the host may have no jq). */
const FIELD = `field() { printf '%s' "$args" | sed -n "s/.*\\"$1\\": *\\"\\([^\\"]*\\)\\".*/\\1/p"; }`;

async function writePlugins(): Promise<void> {
  await mkdir(out);
  const script = async (name: string, body: string) => writeFile(join(plugins, name), body, { mode: 0o755 });
  await script(
    'record-args.sh',
    `#!/bin/sh
args=$(cat)
${FIELD}
echo "site step $INA_STEP ($INA_PHASE): $(field message)"
printf '%s' "$args" > "${out}/record.$INA_PHASE.json"
`,
  );
  await script(
    'write-image.sh',
    `#!/bin/sh
set -e
args=$(cat)
${FIELD}
url=$(field image_url)
echo "writing $url onto $INA_ROOT_DEVICE"
curl -fsS "$url" | dd of="$INA_ROOT_DEVICE" bs=1M oflag=direct conv=fsync 2>&1
echo "site image written"
`,
  );
  await writeFile(
    join(plugins, 'site.json'),
    JSON.stringify({
      name: 'site_steps',
      class_name: 'SiteStepsManager',
      version: '1.0',
      support: 3,
      steps: [
        {
          name: 'record_args',
          program: 'record-args.sh',
          phases: { clean: 0, deploy: 0 },
          abortable: true,
          argsinfo: {
            message: { description: 'what the step says', required: true },
            count: { description: 'a number it records', required: false },
          },
        },
        {
          name: 'write_site_image',
          program: 'write-image.sh',
          root_device: true,
          phases: { deploy: 0 },
          argsinfo: { image_url: { description: 'the raw image to write', required: true } },
        },
      ],
    }),
  );
}

beforeAll(async () => {
  plugins = await mkdtemp(join(tmpdir(), 'ina-plugins-'));
  out = join(plugins, 'out');
  await writePlugins();
  rig = await phase(S, 'start Ironic + agent with plugins, enroll', () =>
    createRig('ina-custom-steps', {
      agentFlags: { 'ina-hardware-managers': plugins },
      node: { automated_clean: false },
      ...(SID ? { ironic: { extraConf: '[DEFAULT]\nenabled_deploy_interfaces = direct,fake,custom-agent\n' } } : {}),
    }),
  );
  raw = await buildRawImage(rig.dir, 'disk.raw');
});

afterAll(async () => {
  await rig?.close();
  await rm(plugins, { recursive: true, force: true });
});

describe(`an operator's plugin steps (Ironic ${ironicKind()})`, () => {
  it('P1. a manual clean runs the plugin step with its args -> manageable', () =>
    chain.step('P1', async () => {
      await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      const steps = [{ interface: 'deploy', step: 'record_args', args: { message: 'cleaning', count: 3 } }];
      const node = await phase(S, 'clean (record_args)', () =>
        rig.drive('clean', ['--clean-steps', JSON.stringify(steps)], 'manageable'),
      );
      expect(node.last_error).toBeNull();
      expect(await cleanStepsRun(rig)).toEqual(['record_args']);
      expect(JSON.parse(await readFile(join(out, 'record.clean.json'), 'utf8'))).toEqual({
        message: 'cleaning',
        count: 3,
      });
      expect(await rig.agent.log()).toMatch(/site step record_args \(clean\): cleaning/);
      const info = (await rig.node()).driver_internal_info;
      expect(info.hardware_manager_version).toEqual({ site_steps: '1.0', generic_hardware_manager: '1.2' });
      await phase(S, 'provide', () => rig.drive('provide', [], 'available'));
    }));

  it('P2. a deploy template runs the plugin deploy step after write_image in a direct deploy -> active', () =>
    chain.step('P2', async () => {
      const steps = [{ interface: 'deploy', step: 'record_args', args: { message: 'deploying' }, priority: 75 }];
      await rig.bm.run(['deploy', 'template', 'create', TRAIT, '--steps', JSON.stringify(steps)]);
      await rig.bm.run(['node', 'add', 'trait', rig.uuid, TRAIT]);
      await rig.bm.run([
        'node',
        'set',
        rig.uuid,
        ...instanceInfoArgs(rig, raw, 'raw', 'sha256'),
        '--instance-info',
        `traits=["${TRAIT}"]`,
      ]);
      const node = await phase(S, 'deploy (direct + template)', () =>
        rig.drive('deploy', ['--config-drive', JSON.stringify(configDriveFor(rig.uuid, 'site'))], 'active'),
      );
      expect(node.last_error).toBeNull();
      expect(JSON.parse(await readFile(join(out, 'record.deploy.json'), 'utf8'))).toEqual({ message: 'deploying' });
      expect((await imagePayloadOnDisk(rig.disk.path, raw)).marker, 'write_image ran too').toBe(raw.marker);
      const log = await rig.agent.log();
      expect(log.indexOf('site step record_args (deploy)'), 'after the image was written').toBeGreaterThan(
        log.lastIndexOf('"msg":"image written"'),
      );
      await rig.bm.run(['node', 'remove', 'trait', rig.uuid, TRAIT]);
      await phase(S, 'undeploy', () => rig.drive('undeploy', [], 'available'));
    }));

  it.skipIf(!SID)('P3. custom-agent: the plugin step alone writes the image -> active', () =>
    chain.step('P3', async () => {
      await rig.bm.run(['node', 'set', rig.uuid, '--deploy-interface', 'custom-agent']);
      // the disk holds nothing of the previous deploy's image: cleaning would not have wiped it (no automated clean)
      await rig.drive('manage', [], 'manageable');
      const wipe = [{ interface: 'deploy', step: 'erase_devices_metadata', args: {} }];
      await rig.drive('clean', ['--clean-steps', JSON.stringify(wipe)], 'manageable');
      expect((await imagePayloadOnDisk(rig.disk.path, raw)).marker).not.toBe(raw.marker);
      await rig.drive('provide', [], 'available');
      const written = (await rig.agent.log()).split('"msg":"image written"').length;
      const steps = [
        { interface: 'deploy', step: 'write_site_image', args: { image_url: rig.images.url(raw.name) }, priority: 80 },
      ];
      const node = await phase(S, 'deploy (custom-agent)', () =>
        rig.drive('deploy', ['--deploy-steps', JSON.stringify(steps)], 'active'),
      );
      expect(node.last_error).toBeNull();
      const payload = await imagePayloadOnDisk(rig.disk.path, raw);
      expect(payload.bytesMatch, 'the plugin wrote the image').toBe(true);
      expect(payload.marker).toBe(raw.marker);
      const log = await rig.agent.log();
      expect(log).toMatch(new RegExp(`writing \\S+ onto ${rig.disk.path}`));
      expect(log).toMatch(/site image written/);
      expect(log.split('"msg":"image written"').length, 'the agent wrote no image itself').toBe(written);
    }),
  );
});
