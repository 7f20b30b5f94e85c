// The pure parts of installing the image's GRUB for BIOS onto a software RAID's holders: where a GPT holder's
// BIOS boot partition goes, the dracut kernel arguments, and finding a separate /boot in the image's fstab. The
// chroot work needs md, which this machine's kernel lacks: test/e2e/raid-bios.test.ts runs it in QEMU.
import { describe, expect, it } from 'vitest';
import { biosBootLabel, biosBootPlacement, bootSourceOf, withMdUuids } from '../../agent/disk/raid-grub.ts';
import { SoftwareRAIDError } from '../../agent/errors.ts';

const MiB = 2 ** 20;

describe('biosBootPlacement', () => {
  it('puts 2 MiB from 1 MiB, in the room a BIOS GPT layout keeps in front, under the first free number', () => {
    const raid = [{ number: 1, start: 8 * MiB, size: 1024 * MiB }];
    expect(biosBootPlacement('/dev/vda', raid, 512)).toEqual({ number: 2, firstSector: 2048, lastSector: 6143 });
    // a second volume after the first does not move it (sgdisk -F would pick the largest free block instead)
    expect(biosBootPlacement('/dev/vda', [...raid, { number: 2, start: 1032 * MiB, size: MiB }], 4096)).toEqual({
      number: 3,
      firstSector: 256,
      lastSector: 767,
    });
    expect(biosBootLabel(1)).toBe('bios-boot-part-1');
  });

  it('refuses a holder where those 2 MiB run into a partition (a layout made for UEFI, or none kept)', () => {
    const tight = () => biosBootPlacement('/dev/vdb', [{ number: 1, start: 2 * MiB, size: 100 * MiB }], 512);
    expect(tight).toThrow(SoftwareRAIDError);
    expect(tight).toThrow(
      'No room for the 2 MiB BIOS boot partition on /dev/vdb between 1 and 3 MiB: partition 1 starts at 2.00 MiB (was the RAID built for UEFI boot?)',
    );
  });
});

describe('withMdUuids', () => {
  const uuids = ['11111111:22222222:33333333:44444444', 'aaaaaaaa:bbbbbbbb:cccccccc:dddddddd'];
  const added = (list: string[]) =>
    `# the software RAID arrays for dracut to assemble (ironic-node-agent)\nGRUB_CMDLINE_LINUX="\${GRUB_CMDLINE_LINUX} ${list.map((u) => `rd.md.uuid=${u}`).join(' ')}"\n`;

  it("extends GRUB_CMDLINE_LINUX on a line of its own, leaving the image's lines exactly as they were", () => {
    for (const file of [
      'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto rhgb"\n',
      'GRUB_CMDLINE_LINUX="quiet splash" # keep\n',
      "export GRUB_CMDLINE_LINUX='x=$y'\n",
    ]) {
      expect(withMdUuids(file, uuids)).toBe(file + added(uuids));
    }
    expect(withMdUuids('GRUB_TIMEOUT=1', uuids.slice(0, 1))).toBe(`GRUB_TIMEOUT=1\n${added(uuids.slice(0, 1))}`);
    expect(withMdUuids('', uuids)).toBe(added(uuids));
  });

  it('names an array once: run again the file is unchanged, and a new array alone is added', () => {
    const once = withMdUuids('GRUB_CMDLINE_LINUX=""\n', uuids.slice(0, 1));
    expect(withMdUuids(once, uuids.slice(0, 1))).toBe(once);
    expect(withMdUuids(once, uuids)).toBe(once + added(uuids.slice(1)));
  });

  it('gives a file that the shell reads as the old value plus the arrays', async () => {
    const { execa } = await import('execa');
    const file = 'GRUB_CMDLINE_LINUX="quiet splash" # keep\n';
    const { stdout } = await execa('sh', ['-c', `${withMdUuids(file, uuids)}\nprintf %s "$GRUB_CMDLINE_LINUX"`]);
    expect(stdout).toBe(`quiet splash ${uuids.map((u) => `rd.md.uuid=${u}`).join(' ')}`);
  });
});

describe('bootSourceOf', () => {
  it('finds a separate /boot by UUID, LABEL or PARTUUID, also as /dev/disk/by-* links', () => {
    expect(bootSourceOf('UUID=abc / ext4 defaults 0 1\nUUID=B00T-1 /boot ext4 defaults 0 2\n')).toEqual({
      key: 'uuid',
      value: 'B00T-1',
    });
    expect(bootSourceOf('LABEL="boot"\t/boot\txfs\tdefaults 0 0')).toEqual({ key: 'label', value: 'boot' });
    expect(bootSourceOf('PARTUUID=0f-02 /boot/ ext2 defaults 0 0')).toEqual({ key: 'partuuid', value: '0f-02' });
    expect(bootSourceOf('/dev/disk/by-uuid/1234-ab /boot ext4 defaults 0 0')).toEqual({
      key: 'uuid',
      value: '1234-ab',
    });
    expect(bootSourceOf('/dev/disk/by-label/my\\x2fboot /boot ext4 defaults 0 0')).toEqual({
      key: 'label',
      value: 'my/boot',
    });
  });

  it('says when /boot comes from a device name it cannot resolve, and null when /boot is on the root', () => {
    expect(bootSourceOf('/dev/sda1 /boot ext4 defaults 0 0')).toEqual({ unresolved: '/dev/sda1' });
    expect(bootSourceOf('# UUID=x /boot ext4\nUUID=y /boot/efi vfat umask=0077 0 1\n')).toBeNull();
    expect(bootSourceOf('')).toBeNull();
  });
});
