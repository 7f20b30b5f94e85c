// The UUID map `standby.get_partition_uuids` reports after a whole-disk image is written: `root uuid` is
// the MBR disk identifier (bytes 440..443, little-endian, as `0x%08x`), plus the ESP's UUID when there is one.
import { open } from 'node:fs/promises';
import type { AgentServices } from '../services.ts';
import { BlockDeviceError } from '../errors.ts';
import { listPartitions, rescanPartitions, type Partition } from './partitions.ts';

export const ESP_GPT_TYPE = 'c12a7328-f81f-11d2-ba4b-00a0c93ec93b';

export function isEsp(p: Pick<Partition, 'partType'>): boolean {
  const t = (p.partType ?? '').toLowerCase();
  return t === ESP_GPT_TYPE || t === '0xef';
}

/** The MBR disk identifier of `disk` as `0x%08x` (GPT disks usually show `0x00000000`). */
export async function diskIdentifier(disk: string): Promise<string> {
  const fh = await open(disk, 'r');
  try {
    const buf = Buffer.alloc(4);
    const { bytesRead } = await fh.read(buf, 0, 4, 440);
    if (bytesRead !== 4) throw new BlockDeviceError(`${disk} is too small to hold an MBR`);
    return `0x${buf.readUInt32LE(0).toString(16).padStart(8, '0')}`;
  } finally {
    await fh.close();
  }
}

/** The first EFI system partition of `disk`, or null. */
export async function findEsp(services: Pick<AgentServices, 'log'>, disk: string): Promise<Partition | null> {
  await rescanPartitions(disk, services.log);
  return (await listPartitions(disk, services.log)).find(isEsp) ?? null;
}

export async function readPartitionUuids(
  services: Pick<AgentServices, 'log'>,
  disk: string,
): Promise<Record<string, string>> {
  const out: Record<string, string> = { 'root uuid': await diskIdentifier(disk) };
  const esp = await findEsp(services, disk);
  // IPA reports the filesystem UUID when there is one, else the partition's own UUID.
  const espUuid = esp ? (esp.uuid ?? esp.partuuid) : null;
  if (espUuid) out['efi system partition uuid'] = espUuid;
  return out;
}
