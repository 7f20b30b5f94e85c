// The instance image build-cloud-image.sh made, read back without booting it: the sha256 file matches,
// GPT with BIOS boot, ESP and root; the MBR's GRUB code points at core.img in the BIOS boot partition and
// core.img's block list at the rest of itself; the ESP holds the removable-path loader; the root holds
// the ConfigDrive-only cloud-init setting and a grub.cfg and fstab naming its own filesystem UUID.
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { closeSync, mkdtempSync, openSync, readFileSync, readSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';

const image = process.env.FULLLOOP_IMAGE;
const run = (cmd: string, ...args: string[]) => execFileSync(cmd, args, { encoding: 'utf8' });

function readAt(file: string, offset: number, length: number): Buffer {
  const fd = openSync(file, 'r');
  try {
    const b = Buffer.alloc(length);
    readSync(fd, b, 0, length, offset);
    return b;
  } finally {
    closeSync(fd);
  }
}

describe('instance image (FULLLOOP_IMAGE)', () => {
  it('is a compressed qcow2 whose sha256 file matches, with both GRUBs and the cloud-init setting', () => {
    if (!image) throw new Error('FULLLOOP_IMAGE unset: run through scripts/fullloop/run.sh (npm run test:fullloop)');
    const qcow = image;
    const want = readFileSync(`${qcow}.sha256`, 'utf8').split(/\s+/)[0];
    expect(createHash('sha256').update(readFileSync(qcow)).digest('hex')).toBe(want);
    expect(JSON.parse(run('qemu-img', 'info', '--output=json', qcow)).format).toBe('qcow2');

    const dir = mkdtempSync('/tmp/fullloop-image-check-');
    const raw = join(dir, 'disk.raw');
    let loop = '';
    try {
      run('qemu-img', 'convert', '-O', 'raw', qcow, raw);
      const parts = run('sgdisk', '-p', raw);
      expect(parts).toMatch(/^\s+1\s+2048\s+\d+\s+.*EF02/m);
      expect(parts).toMatch(/^\s+2\s+\d+\s+\d+\s+.*EF00/m);
      expect(parts).toMatch(/^\s+3\s+\d+\s+\d+\s+.*8300/m);

      const mbr = readAt(raw, 0, 512);
      expect(mbr.readUInt16LE(510)).toBe(0xaa55);
      expect(mbr[0x1c2]).toBe(0xee); // protective MBR kept
      expect(mbr.readBigUInt64LE(0x5c)).toBe(2048n); // boot.img -> core.img
      const core = readAt(raw, 2048 * 512, 512);
      expect(core.readBigUInt64LE(0x200 - 12)).toBe(2049n);
      expect(core.readUInt16LE(0x200 - 4)).toBeGreaterThan(10);

      const start = (n: number) => Number(run('partx', '-g', '-o', 'START', '-n', String(n), raw).trim()) * 512;
      const loader = execFileSync('mtype', ['-i', `${raw}@@${start(2)}`, '::/EFI/BOOT/BOOTX64.EFI']);
      expect(loader.subarray(0, 2).toString()).toBe('MZ');

      loop = run('losetup', '-f', '--show', '-r', '-o', String(start(3)), raw).trim();
      const uuid = run('blkid', '-p', '-s', 'UUID', '-o', 'value', loop).trim();
      const cat = (path: string) =>
        execFileSync('debugfs', ['-R', `cat ${path}`, loop], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'ignore'] });
      expect(cat('/etc/cloud/cloud.cfg.d/90-fullloop.cfg')).toMatch(/datasource_list: \[ ConfigDrive, None \]/);
      expect(cat('/etc/fstab')).toContain(`UUID=${uuid} / ext4`);
      const grub = cat('/boot/grub/grub.cfg');
      expect(grub).toContain(`root=UUID=${uuid}`);
      expect(grub).toContain('console=ttyS0,115200');
      expect(cat('/boot/grub/i386-pc/normal.mod').length).toBeGreaterThan(0);
    } finally {
      if (loop) run('losetup', '-d', loop);
      rmSync(dir, { recursive: true, force: true });
    }
  }, 300_000);
});
