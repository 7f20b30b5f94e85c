// The pure parts of installing the image's GRUB for BIOS onto a software RAID's holders: where a GPT holder's
// BIOS boot partition goes, the dracut kernel arguments, and finding a separate /boot in the image's fstab. The
// chroot work needs md, which this machine's kernel lacks: test/e2e/raid-bios.test.ts runs it in QEMU.
import { describe, expect, it } from 'vitest';
import { biosBootLabel, biosBootPlacement, bootSourceOf, withMdUuids } from '../../agent/disk/raid-grub.ts';
import { SoftwareRAIDError } from '../../agent/errors.ts';

const MiB = 2 ** 20;

describe('biosBootPlacement', () => {
  it('puts 2 MiB at the first free sector, in the room a BIOS GPT layout keeps, under the first free number', () => {
    const raid = [{ number: 1, start: 8 * MiB, size: 1024 * MiB }];
    expect(biosBootPlacement('/dev/vda', raid, 2048, 512)).toEqual({ number: 2, firstSector: 2048, lastSector: 6143 });
    expect(biosBootPlacement('/dev/vda', [...raid, { number: 2, start: 1032 * MiB, size: MiB }], 256, 4096)).toEqual({
      number: 3,
      firstSector: 256,
      lastSector: 767,
    });
    expect(biosBootLabel(1)).toBe('bios-boot-part-1');
  });

  it('refuses a holder where those 2 MiB run into a partition (a layout made for UEFI, or none kept)', () => {
    const tight = () => biosBootPlacement('/dev/vdb', [{ number: 1, start: 2 * MiB, size: 100 * MiB }], 2048, 512);
    expect(tight).toThrow(SoftwareRAIDError);
    expect(tight).toThrow(
      'No room for the 2 MiB BIOS boot partition on /dev/vdb at 1.00 MiB: partition 1 is there (was the RAID built for UEFI boot?)',
    );
  });
});

describe('withMdUuids', () => {
  const uuids = ['11111111:22222222:33333333:44444444', 'aaaaaaaa:bbbbbbbb:cccccccc:dddddddd'];

  it("adds rd.md.uuid for each array to GRUB_CMDLINE_LINUX, keeping what is there and the file's other lines", () => {
    const file = 'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto rhgb"\nGRUB_DISABLE_RECOVERY="true"\n';
    expect(withMdUuids(file, uuids)).toBe(
      'GRUB_TIMEOUT=5\nGRUB_CMDLINE_LINUX="crashkernel=auto rhgb rd.md.uuid=11111111:22222222:33333333:44444444 rd.md.uuid=aaaaaaaa:bbbbbbbb:cccccccc:dddddddd"\nGRUB_DISABLE_RECOVERY="true"\n',
    );
  });

  it('names an array once: run again, the file is unchanged', () => {
    const once = withMdUuids('GRUB_CMDLINE_LINUX=""\n', uuids);
    expect(withMdUuids(once, uuids)).toBe(once);
  });

  it('adds the line to a file without one (or no file), and reads single quotes and no quotes', () => {
    expect(withMdUuids('', uuids.slice(0, 1))).toBe(
      'GRUB_CMDLINE_LINUX="rd.md.uuid=11111111:22222222:33333333:44444444"\n',
    );
    expect(withMdUuids('GRUB_TIMEOUT=1', uuids.slice(0, 1))).toBe(
      'GRUB_TIMEOUT=1\nGRUB_CMDLINE_LINUX="rd.md.uuid=11111111:22222222:33333333:44444444"\n',
    );
    expect(withMdUuids("GRUB_CMDLINE_LINUX='quiet'\n", uuids.slice(1))).toBe(
      'GRUB_CMDLINE_LINUX="quiet rd.md.uuid=aaaaaaaa:bbbbbbbb:cccccccc:dddddddd"\n',
    );
    expect(withMdUuids('GRUB_CMDLINE_LINUX=quiet\n', uuids.slice(1))).toBe(
      'GRUB_CMDLINE_LINUX="quiet rd.md.uuid=aaaaaaaa:bbbbbbbb:cccccccc:dddddddd"\n',
    );
  });
});

describe('bootSourceOf', () => {
  it('finds a separate /boot by UUID, LABEL or PARTUUID and ignores comments, other mounts and device paths', () => {
    expect(bootSourceOf('UUID=abc / ext4 defaults 0 1\nUUID=B00T-1 /boot ext4 defaults 0 2\n')).toEqual({
      key: 'uuid',
      value: 'B00T-1',
    });
    expect(bootSourceOf('LABEL="boot"\t/boot\txfs\tdefaults 0 0')).toEqual({ key: 'label', value: 'boot' });
    expect(bootSourceOf('PARTUUID=0f-02 /boot ext2 defaults 0 0')).toEqual({ key: 'partuuid', value: '0f-02' });
    expect(bootSourceOf('# UUID=x /boot ext4\nUUID=y /boot/efi vfat umask=0077 0 1\n')).toBeNull();
    expect(bootSourceOf('/dev/sda1 /boot ext4 defaults 0 0')).toBeNull();
    expect(bootSourceOf('')).toBeNull();
  });
});
