// The deploy half every scenario shares: point the node at an image, deploy it with a JSON config
// drive (Ironic builds the ISO), and check what landed on the loop device.
import { expect } from 'vitest';
import { imagePayloadOnDisk, readConfigDrive } from './disk-checks.ts';
import type { BuiltImage } from './images.ts';
import type { Rig } from './rig.ts';

export type ChecksumStyle = 'sha256' | 'md5' | 'wrong-sha256';

export function instanceInfoArgs(
  rig: Rig,
  image: BuiltImage,
  format: 'raw' | 'qcow2',
  checksum: ChecksumStyle,
): string[] {
  const info: Record<string, string> = { image_source: rig.images.url(image.name), image_disk_format: format };
  if (checksum === 'md5') info.image_checksum = image.md5;
  else {
    info.image_os_hash_algo = 'sha256';
    info.image_os_hash_value = checksum === 'sha256' ? image.sha256 : 'f'.repeat(64);
  }
  return Object.entries(info).flatMap(([k, v]) => ['--instance-info', `${k}=${v}`]);
}

export function configDriveFor(uuid: string, tag: string) {
  return {
    meta_data: { uuid, hostname: `ina-${tag}`, public_keys: { conformance: `ssh-ed25519 AAAAC3Nz ina-${tag}` } },
    user_data: `#cloud-config\nruncmd:\n - echo ina-${tag}\n`,
    network_data: { links: [], networks: [], services: [{ type: 'dns', address: '192.0.2.53' }] },
  };
}

/** Sets the image, deploys with a config drive, and waits for `active`. */
export async function deploy(
  rig: Rig,
  image: BuiltImage,
  format: 'raw' | 'qcow2',
  checksum: ChecksumStyle,
  tag: string,
) {
  await rig.bm.run(['node', 'set', rig.uuid, ...instanceInfoArgs(rig, image, format, checksum)]);
  const configDrive = configDriveFor(rig.uuid, tag);
  await rig.drive('deploy', ['--config-drive', JSON.stringify(configDrive)], 'active');
  return configDrive;
}

/** The image's bytes and marker file are on the disk, and a config-2 partition carries our config drive. */
export async function expectDeployed(
  rig: Rig,
  raw: BuiltImage,
  configDrive: ReturnType<typeof configDriveFor>,
): Promise<void> {
  const payload = await imagePayloadOnDisk(rig.disk.path, raw);
  expect(payload.bytesMatch, 'root partition bytes on the disk equal the image').toBe(true);
  expect(payload.marker).toBe(raw.marker);
  const cd = await readConfigDrive(rig.disk.path);
  expect(cd, 'a partition with an ISO 9660 volume labelled config-2').not.toBeNull();
  expect(cd!.metaData).toMatchObject(configDrive.meta_data);
  expect(cd!.userData.trimEnd()).toBe(configDrive.user_data.trimEnd());
  expect(cd!.networkData).toMatchObject(configDrive.network_data);
}
