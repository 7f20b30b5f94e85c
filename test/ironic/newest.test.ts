// What a current conductor sends beyond a plain deploy, against the real conductor INA_IRONIC picks (one
// conductor, one agent for the whole file, to keep the suite lean): the token rule on GET, a deploy template
// with in-band steps (erase_devices_metadata before the image, inject_files after it), system.lockdown for a
// node with disable_power_off, servicing with an in-band step, and rescue with a hashed password. Lockdown and
// servicing need API 1.95 / 1.87: on 21.4 (1.82) those steps are skipped, saying so.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AgentClient } from '../helpers/agent-client.ts';
import { configDriveFor, instanceInfoArgs } from './support/deploy.ts';
import { imagePayloadOnDisk } from './support/disk-checks.ts';
import { ironicKind } from './support/ironic.ts';
import { buildRawImage, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

const S = 'newest';
const NEW = ironicKind() === 'sid';
if (!NEW)
  console.warn('newest.test.ts N3 skipped: servicing needs API 1.87; Ironic 21.4 speaks 1.82 (INA_IRONIC=sid runs it)');
const TRAIT = 'CUSTOM_INA_INJECT';
const b64 = (s: string) => Buffer.from(s).toString('base64');
let rig: Rig;
let raw: BuiltImage;
let rescueRoot: string;
const chain = new StepChain();

/** A file's text from the deployed root partition (ext4), read with debugfs without mounting. */
async function fileOnDisk(rig: Rig, path: string): Promise<string | null> {
  const r = await execa('debugfs', ['-R', `cat ${path}`, `${rig.disk.path}p1`], { reject: false, stderr: 'pipe' });
  return /File not found|not found by ext2_lookup/.test(r.stderr) ? null : r.stdout;
}

/** The agent's own API, with the certificate Ironic stored, as the conductor reaches it (no token given). */
async function bareClient(rig: Rig): Promise<AgentClient> {
  const info = (await rig.node()).driver_internal_info;
  const ca = typeof info.agent_verify_ca === 'string' ? await readFile(info.agent_verify_ca, 'utf8') : undefined;
  return new AgentClient({ url: String(info.agent_url), token: null, ...(ca ? { ca } : {}), maxAttempts: 1 });
}

beforeAll(async () => {
  rescueRoot = await mkdtemp(join(tmpdir(), 'ina-rescue-root-'));
  await mkdir(join(rescueRoot, 'etc'));
  await writeFile(join(rescueRoot, 'etc', 'passwd'), 'root:x:0:0:root:/root:/bin/sh\n');
  await writeFile(join(rescueRoot, 'etc', 'shadow'), 'root:*:20000:0:99999:7:::\n');
  rig = await phase(S, 'start Ironic + agent, enroll', () =>
    createRig('ina-newest', { agentFlags: { 'ina-rescue-root': rescueRoot } }),
  );
  raw = await buildRawImage(rig.dir, 'disk.raw');
});

afterAll(async () => {
  await rig?.close();
  await rm(rescueRoot, { recursive: true, force: true });
});

describe(`newer commands against Ironic ${ironicKind()}`, () => {
  it(`N1. the agent token on GET: ${NEW ? 'required from the first request (API >= 1.96)' : 'adaptive (21.4 sends none on GET)'}`, () =>
    chain.step('N1', async () => {
      await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
      const client = await bareClient(rig);
      try {
        if (NEW) await expect(client.commands()).rejects.toThrow(/401/);
        else expect(await client.commands()).toEqual([]);
      } finally {
        await client.close();
      }
      await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
      // the rescue interface can change only before the node is active
      await rig.bm.run(['node', 'set', rig.uuid, '--rescue-interface', 'agent']);
      const node = await phase(S, 'provide (automated clean)', () => rig.drive('provide', [], 'available'));
      expect(node.last_error).toBeNull();
    }));

  it(`N2. a deploy template runs erase_devices_metadata (95) and inject_files (70) in-band${NEW ? ', and disable_power_off ends in system.lockdown' : ''}`, () =>
    chain.step('N2', async () => {
      const steps = [
        { interface: 'deploy', step: 'erase_devices_metadata', args: {}, priority: 95 },
        {
          interface: 'deploy',
          step: 'inject_files',
          priority: 70,
          args: {
            files: [
              { path: '/etc/ina/by-number.conf', partition: 1, content: b64('number\n'), mode: 0o600 },
              { path: '/by-partlabel.txt', partition: '/dev/disk/by-partlabel/root', content: b64('partlabel\n') },
              { path: '/etc/ina/by-path.conf', content: b64('path\n') },
            ],
          },
        },
      ];
      await rig.bm.run(['deploy', 'template', 'create', TRAIT, '--steps', JSON.stringify(steps)]);
      await rig.bm.run(['node', 'add', 'trait', rig.uuid, TRAIT]);
      if (NEW) await rig.bm.run(['node', 'set', rig.uuid, '--disable-power-off']);
      await rig.bm.run([
        'node',
        'set',
        rig.uuid,
        ...instanceInfoArgs(rig, raw, 'raw', 'sha256'),
        '--instance-info',
        `traits=["${TRAIT}"]`,
      ]);
      await phase(S, NEW ? 'deploy with template + lockdown' : 'deploy with template', () =>
        rig.drive('deploy', ['--config-drive', JSON.stringify(configDriveFor(rig.uuid, 'newest'))], 'active'),
      );
      const payload = await imagePayloadOnDisk(rig.disk.path, raw);
      expect(payload.marker, 'the image is on the disk').toBe(raw.marker);
      expect(await fileOnDisk(rig, '/etc/ina/by-number.conf')).toBe('number');
      expect(await fileOnDisk(rig, '/by-partlabel.txt')).toBe('partlabel');
      expect(await fileOnDisk(rig, '/etc/ina/by-path.conf')).toBe('path');
      const log = await rig.agent.log();
      expect(log, 'the agent ran erase_devices_metadata').toMatch(/disk metadata erased/);
      expect(log.indexOf('disk metadata erased'), 'before the image was written').toBeLessThan(
        log.indexOf('files injected'),
      );
      if (NEW) {
        expect(log).toMatch(/API and heartbeat stopped; idling/);
        expect(rig.agent.exited(), 'a locked-down agent idles, it does not exit').toBe(false);
        const client = await bareClient(rig);
        await expect(client.commands(), 'the API is down after lockdown').rejects.toThrow(
          /ECONNREFUSED|Connection to agent failed/,
        );
        await client.close();
        await rig.bm.run(['node', 'set', rig.uuid, '--enable-power-off']);
        await rig.restartAgent();
      }
    }));

  it.skipIf(!NEW)('N3. servicing (API 1.87) runs inject_files in-band on the active node', () =>
    chain.step('N3', async () => {
      const steps = [
        {
          interface: 'deploy',
          step: 'inject_files',
          args: { files: [{ path: '/etc/ina/serviced.conf', partition: 1, content: b64('serviced\n') }] },
        },
      ];
      await phase(S, 'service (inject_files)', () =>
        rig.drive('service', ['--service-steps', JSON.stringify(steps)], 'active'),
      );
      expect(await fileOnDisk(rig, '/etc/ina/serviced.conf')).toBe('serviced');
      expect(await rig.agent.log()).toMatch(/execute_service_step/);
    }),
  );

  it('N4. rescue sets the hashed password for the rescue user (fake root), then unrescue -> active', () =>
    chain.step('N4', async () => {
      // fake boot cannot rescue: ipxe (its config written, nothing booted) with the ramdisk URLs it fetches
      const kernel = join(rig.dir, 'rescue.kernel');
      await writeFile(kernel, 'not a kernel: fake power boots nothing\n');
      await writeFile(join(rig.dir, 'rescue.initramfs'), 'not an initramfs\n');
      await rig.bm.run(['node', 'maintenance', 'set', rig.uuid]);
      await rig.bm.run([
        'node',
        'set',
        rig.uuid,
        '--boot-interface',
        'ipxe',
        ...['rescue', 'deploy'].flatMap((m) => [
          '--driver-info',
          `${m}_kernel=${rig.images.url('rescue.kernel')}`,
          '--driver-info',
          `${m}_ramdisk=${rig.images.url('rescue.initramfs')}`,
        ]),
      ]);
      await rig.bm.run(['node', 'maintenance', 'unset', rig.uuid]);
      await phase(S, 'rescue', () => rig.drive('rescue', ['--rescue-password', 'ina-Rescue-pw'], 'rescue'));
      const shadow = await readFile(join(rescueRoot, 'etc', 'shadow'), 'utf8');
      const hash = /^rescue:([^:]+):/m.exec(shadow)?.[1];
      expect(hash, 'a crypt hash for the rescue user').toMatch(/^\$[56]\$/);
      const salt = hash!.split('$')[2]!;
      const again = await execa('openssl', [
        'passwd',
        hash!.startsWith('$5$') ? '-5' : '-6',
        '-salt',
        salt,
        'ina-Rescue-pw',
      ]);
      expect(again.stdout, 'the hash is of the password given to Ironic').toBe(hash);
      expect(await readFile(join(rescueRoot, 'etc', 'ipa-rescue-config', 'ipa-rescue-password'), 'utf8')).toBe(hash);
      await phase(S, 'unrescue', () => rig.drive('unrescue', [], 'active'));
    }));
});
