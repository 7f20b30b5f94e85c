// Fixtures for the disk tests: config-2 ISOs built with genisoimage (as ironic builds them), their
// gzip+base64 wire form, and agent services whose device guard allows only the test's loop devices.
import { mkdir, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { gzipSync } from 'node:zlib';
import { execa } from 'execa';
import { createAgent } from '../../agent/agent.ts';
import type { AgentServices } from '../../agent/services.ts';
import { buildConfig } from '../../agent/config/config.ts';
import { nullLogger } from '../../agent/log.ts';

export const DEFAULT_FILES: Readonly<Record<string, string>> = {
  'openstack/latest/meta_data.json': '{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "name": "test-node"}',
  'openstack/latest/user_data': '#cloud-config\nhostname: test-node\n',
  'openstack/2012-08-10/meta_data.json': '{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"}',
};

/** An ISO9660 image with Joliet and Rock Ridge, made with ironic's genisoimage flags. */
export async function buildIso(
  files: Readonly<Record<string, string | Buffer>> = DEFAULT_FILES,
  label = 'config-2',
): Promise<Buffer> {
  const work = await mkdtemp(join(tmpdir(), 'ina-cd-fixture-'));
  try {
    const tree = join(work, 'tree');
    await mkdir(tree);
    for (const [path, content] of Object.entries(files)) {
      await mkdir(dirname(join(tree, path)), { recursive: true });
      await writeFile(join(tree, path), content);
    }
    const iso = join(work, 'drive.iso');
    await execa('genisoimage', [
      '-quiet',
      '-o',
      iso,
      '-ldots',
      '-allow-lowercase',
      '-allow-multidot',
      '-l',
      '-J',
      '-r',
      '-V',
      label,
      tree,
    ]);
    return await readFile(iso);
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** The form ironic sends: base64 of the gzip-compressed image. */
export function toWire(image: Buffer): string {
  return gzipSync(image).toString('base64');
}

/** Agent services for disk code: the device guard allows only `allowlist` (nothing when it is empty). */
export function diskServices(allowlist: readonly string[], flags: Record<string, string> = {}): AgentServices {
  const config = buildConfig(
    new Map(),
    // An empty list would mean "no allow-list"; /dev/null is a device no disk matches.
    new Map(Object.entries({ standalone: 'true', 'device-allowlist': allowlist.join(',') || '/dev/null', ...flags })),
  );
  return createAgent(config, nullLogger).services;
}
