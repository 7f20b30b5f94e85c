#!/usr/bin/env python3
"""Installs GRUB for BIOS on a GPT disk image the way grub-bios-setup does, which Debian ships only in
grub-pc (whose postinst wants a real machine): core.img into the BIOS boot partition at START, its
first sector's block list pointing at the rest, and boot.img's code in the MBR pointing at core.img,
keeping the protective MBR's partition table."""
import struct
import sys

disk, boot_img, core_img, start = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
boot = bytearray(open(boot_img, 'rb').read())
core = bytearray(open(core_img, 'rb').read())
if len(boot) != 512:
    sys.exit('boot.img is not one sector')
core += b'\0' * (-len(core) % 512)
sectors = len(core) // 512
if sectors > 2048:
    sys.exit(f'core.img needs {sectors} sectors; the BIOS boot partition has 2048')
# diskboot.img (core's first sector) ends with a block list: start LBA (u64), sectors (u16), segment (u16).
struct.pack_into('<QH', core, 0x200 - 12, start + 1, sectors - 1)
# boot.img: LBA of core.img at 0x5c; at 0x66 the jump over the boot-drive check becomes two NOPs
# (a hard disk: trust the drive number the BIOS passes only if it looks like one), as grub-setup does.
struct.pack_into('<Q', boot, 0x5c, start)
boot[0x66:0x68] = b'\x90\x90'
with open(disk, 'r+b') as f:
    mbr = bytearray(f.read(512))
    mbr[0:0x1b8] = boot[0:0x1b8]  # code only: disk signature and partition table stay
    f.seek(0)
    f.write(mbr)
    f.seek(start * 512)
    f.write(core)
