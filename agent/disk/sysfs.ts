// Reads block-device facts straight from /sys, because inside the ramdisk there is no udev to
// publish them (no /dev/disk/by-*, no udev database for lsblk to read).
import { listSys, liveRoot, readSys } from '../host/sysfs.ts';
import { basename } from 'node:path';

export const SYS_BLOCK = '/sys/block';

/** Partition kernel names of a disk, in partition-number order (`loop3p1`, `sda2`, …). */
export async function sysPartitions(disk: string): Promise<string[]> {
  const entries = await listSys(`${SYS_BLOCK}/${disk}`);
  const parts: { name: string; n: number }[] = [];
  for (const entry of entries) {
    if (!entry.startsWith(disk)) continue;
    const n = Number(await readSys(`${SYS_BLOCK}/${disk}/${entry}/partition`));
    if (Number.isInteger(n) && n > 0) parts.push({ name: entry, n });
  }
  return parts.sort((a, b) => a.n - b.n).map((p) => p.name);
}

/** The partition number's kernel name for a disk, as the kernel names it (`loop3p2`, `sda2`). */
export function partitionName(disk: string, n: number): string {
  return /\d$/.test(disk) ? `${disk}p${n}` : `${disk}${n}`;
}

/** The first `host:channel:target:lun` under the device's scsi_device directory. */
export async function sysHctl(name: string, sysBlock = SYS_BLOCK): Promise<string | null> {
  const entries = await listSys(`${sysBlock}/${name}/device/scsi_device`);
  return entries[0] ?? null;
}

/**
 * The persistent path name udev's path_id would give (`pci-0000:00:1f.2-ata-1.0`, `pci-0000:01:00.0-nvme-1`,
 * `pci-0000:00:05.0`, `pci-0000:00:10.0-scsi-0:0:1:0`), derived from the device's sysfs location, so that a
 * `by_path` hint copied from an installed system or an IPA inventory names the same disk. ATA: the port's
 * `port_no` and the target (behind a port multiplier, its port); NVMe: the namespace id, not the kernel's
 * instance number. Only the common PCI-attached layouts are covered; anything else has none.
 */
export async function sysByPath(name: string, sysBlock = SYS_BLOCK): Promise<string | null> {
  const dev = await liveRoot.realpath(`${sysBlock}/${name}`);
  if (dev === null) return null;
  const parts = dev.split('/');
  const pci = parts.filter((p) => /^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$/.test(p)).at(-1);
  if (!pci) return null;
  let suffix = '';
  const ataAt = parts.findIndex((p) => /^ata\d+$/.test(p));
  const hctl = await sysHctl(name, sysBlock);
  if (ataAt >= 0) {
    const port = parts.slice(0, ataAt + 1).join('/');
    const portNo = await readSys(`${port}/ata_port/${parts[ataAt]}/port_no`);
    const [, bus, target] = (hctl ?? '').split(':');
    if (!portNo || bus === undefined || target === undefined) return null;
    suffix = bus !== '0' ? `-ata-${portNo}.${bus}.0` : `-ata-${portNo}.${target}`;
  } else if (/^nvme\d+n\d+$/.test(name)) {
    const nsid = await readSys(`${sysBlock}/${name}/nsid`);
    if (!nsid) return null;
    suffix = `-nvme-${nsid}`;
  } else if (hctl) suffix = `-scsi-${hctl}`;
  return `/dev/disk/by-path/pci-${pci}${suffix}`;
}

export interface SysIdentity {
  serial: string | null;
  wwn: string | null;
  wwnWithExtension: string | null;
  wwnVendorExtension: string | null;
}

/**
 * The unit serial number of SCSI VPD page 0x80 (`device/vpd_pg80`: a 4-byte header, then the serial, padded
 * with spaces), which udev's scsi_id publishes for SCSI, SAS and SATA disks (libata answers the page with the
 * ATA serial). The ramdisk has no udev, and sysfs has no text serial for these disks.
 */
async function vpdSerial(base: string): Promise<string | null> {
  const page = await liveRoot.readBytes(`${base}/device/vpd_pg80`);
  if (page === null || page.length < 4 || page[1] !== 0x80) return null;
  const text = page
    .subarray(4, 4 + page.readUInt16BE(2))
    .toString('latin1')
    .replace(/\0/g, '')
    .trim();
  return /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/.test(text) ? text : null;
}

/**
 * Serial and WWN as the kernel exposes them for virtio, NVMe and SCSI disks. A 32-digit NAA WWN (NAA 6,
 * registered extended: RAID volumes, SAN LUNs) is what lsblk shows as WWN with udev, and so IPA's `wwn`; udev
 * also splits it: the first 16 digits, and the rest as the vendor extension.
 */
export async function sysIdentity(name: string, sysBlock = SYS_BLOCK): Promise<SysIdentity> {
  const base = `${sysBlock}/${name}`;
  const serial =
    (await readSys(`${base}/serial`)) ?? (await readSys(`${base}/device/serial`)) ?? (await vpdSerial(base));
  const wwid = (await readSys(`${base}/wwid`)) ?? (await readSys(`${base}/device/wwid`));
  const naa = wwid ? /^naa\.([0-9a-f]+)$/i.exec(wwid)?.[1]?.toLowerCase() : undefined;
  if (!naa) return { serial, wwn: wwid, wwnWithExtension: wwid, wwnVendorExtension: null };
  const full = `0x${naa}`;
  const ext = naa.length > 16 ? `0x${naa.slice(16)}` : null;
  return { serial, wwn: full, wwnWithExtension: full, wwnVendorExtension: ext };
}

export function kernelNameOf(path: string): string {
  return basename(path);
}

/** A disk's logical sector size in bytes (what sgdisk's sector numbers count), 512 when sysfs does not say. */
export async function logicalSectorSize(disk: string, sysBlock = SYS_BLOCK): Promise<number> {
  return Number(await readSys(`${sysBlock}/${kernelNameOf(disk)}/queue/logical_block_size`)) || 512;
}
