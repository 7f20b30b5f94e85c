// The seed's image paths: `[agent]image_download_source=local`, where the conductor downloads the image into its
// own cache, checks it, converts it to raw when `[DEFAULT]force_raw_images` says so (recomputing the checksum),
// and serves it from its own HTTP root. One conductor per force_raw setting, one node, one agent; raw, qcow2 and
// a compressed image (zstd with force_raw on, gzip with it off) deployed one after another. Each deploy checks
// what the conductor computed (instance_info), what the agent was given (its "image requested" log line: the
// conductor's URL, disk_format, the checksum field and value) and the bytes on the disk. Automated cleaning is
// off for the node (lean: the lifecycle file proves cleaning); the test zeroes the disk between deploys itself,
// so every byte check sees a fresh write.
import { open } from 'node:fs/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { imagePayloadOnDisk } from './support/disk-checks.ts';
import { ironicKind } from './support/ironic.ts';
import { buildRawImage, compressed, toQcow2, type BuiltImage } from './support/images.ts';
import { phase } from './support/phase.ts';
import { createRig, waitForHeartbeat, type Rig } from './support/rig.ts';
import { StepChain } from './support/step-chain.ts';

type Format = 'raw' | 'qcow2';

interface ImageRequested {
  urls: string[];
  disk_format: string | null;
  checksum: { field: string; algo: string | null; value: string };
}

/** The `image requested` lines of the agent's log (pino JSON), oldest first. */
async function imageRequests(rig: Rig): Promise<ImageRequested[]> {
  return (await rig.agent.log())
    .split('\n')
    .filter((l) => l.includes('"image requested"'))
    .map((l) => JSON.parse(l) as ImageRequested);
}

/** Zeroes the part of the disk an image covers, so the next deploy's bytes are its own. */
async function zeroDisk(rig: Rig, bytes: number): Promise<void> {
  const fh = await open(rig.disk.path, 'r+');
  try {
    await fh.write(Buffer.alloc(bytes), 0, bytes, 0);
    await fh.sync();
  } finally {
    await fh.close();
  }
}

interface Case {
  image: () => BuiltImage;
  /** The format Ironic is told (a compressed image is declared raw: no format inspector knows gzip or zstd). */
  declared: Format;
  /**
   * What the conductor hands the agent (sid's format inspector calls a GPT disk `gpt`, which the agent takes as raw).
   */
  expect: { diskFormat: Format | 'gpt'; converted: boolean; compression?: 'gzip' | 'zstd' };
}

function scenario(forceRaw: boolean) {
  const S = `image-sources force_raw=${forceRaw}`;
  const packing = forceRaw ? 'zstd' : 'gzip';
  let rig: Rig;
  let raw: BuiltImage;
  let qcow2: BuiltImage;
  let packed: BuiltImage;
  const chain = new StepChain();
  let deployed = 0;

  const cases: Record<string, Case> = {
    raw: {
      image: () => raw,
      declared: 'raw',
      expect: { diskFormat: !forceRaw && ironicKind() === 'sid' ? 'gpt' : 'raw', converted: false },
    },
    qcow2: {
      image: () => qcow2,
      declared: 'qcow2',
      expect: { diskFormat: forceRaw ? 'raw' : 'qcow2', converted: forceRaw },
    },
    [packing]: {
      image: () => packed,
      declared: 'raw',
      expect: { diskFormat: 'raw', converted: false, compression: packing },
    },
  };

  describe(`image_download_source=local, force_raw_images=${forceRaw} (Ironic ${ironicKind()})`, () => {
    beforeAll(async () => {
      rig = await phase(S, 'start Ironic + agent, enroll', () =>
        createRig(`ina-local-${forceRaw ? 'raw' : 'asis'}`, {
          ironic: { downloadSource: 'local', forceRaw },
          node: { automated_clean: false },
        }),
      );
      raw = await buildRawImage(rig.dir, 'disk.raw');
      qcow2 = await toQcow2(rig.dir, raw, 'disk.qcow2');
      packed = await compressed(raw, packing);
    });

    afterAll(async () => {
      await rig?.close();
    });

    it('the node is manageable, then available (automated cleaning off)', () =>
      chain.step('available', async () => {
        await phase(S, 'first heartbeat (enroll)', () => waitForHeartbeat(rig));
        await phase(S, 'manage', () => rig.drive('manage', [], 'manageable'));
        const node = await phase(S, 'provide', () => rig.drive('provide', [], 'available'));
        expect(node.last_error).toBeNull();
      }));

    for (const [name, c] of Object.entries(cases)) {
      const what = c.expect.converted
        ? 'converted to raw, checksum recomputed'
        : `served as ${c.expect.diskFormat}, checksum kept`;
      it(`${name}: the conductor caches it and serves it (${what}); the disk holds the image`, () =>
        chain.step(name, async () => {
          const image = c.image();
          if (deployed++ > 0) {
            await phase(S, 'undeploy (no cleaning)', () => rig.drive('undeploy', [], 'available'));
            await zeroDisk(rig, raw.root.end);
          }
          const info = {
            image_source: rig.images.url(image.name),
            image_disk_format: c.declared,
            image_os_hash_algo: 'sha256',
            image_os_hash_value: image.sha256,
          };
          await rig.bm.run([
            'node',
            'set',
            rig.uuid,
            ...Object.entries(info).flatMap(([k, v]) => ['--instance-info', `${k}=${v}`]),
          ]);
          const requestsBefore = (await imageRequests(rig)).length;
          const node = await phase(S, `deploy ${name}`, () => rig.drive('deploy', [], 'active'));

          // what the conductor computed
          const ii = node.instance_info;
          expect(ii.image_disk_format).toBe(c.expect.diskFormat);
          expect(ii.image_os_hash_algo).toBe('sha256');
          expect(ii.image_os_hash_value, 'sha256 of what the conductor serves').toBe(
            c.expect.converted ? raw.sha256 : image.sha256,
          );
          expect(ii.image_checksum ?? null, 'no legacy checksum').toBeNull();

          // what the agent was given
          const requests = (await imageRequests(rig)).slice(requestsBefore);
          expect(requests, 'one write_image for this deploy').toHaveLength(1);
          const got = requests[0]!;
          expect(got.urls).toEqual([`${rig.ironic.httpUrl}/agent_images/${rig.uuid}`]);
          expect(got.disk_format).toBe(c.expect.diskFormat === 'gpt' ? 'raw' : c.expect.diskFormat);
          expect(got.checksum).toEqual({
            field: 'os_hash_value',
            algo: 'sha256',
            value: c.expect.converted ? raw.sha256 : image.sha256,
          });
          const log = await rig.agent.log();
          if (c.expect.compression)
            expect(log, 'the agent decoded the image on the way').toMatch(
              new RegExp(`"compression":"${c.expect.compression}"`),
            );

          // the bytes on the disk
          const payload = await imagePayloadOnDisk(rig.disk.path, raw);
          expect(payload.bytesMatch, 'root partition bytes on the disk equal the raw image').toBe(true);
          expect(payload.marker).toBe(raw.marker);
        }));
    }
  });
}

scenario(true);
scenario(false);
