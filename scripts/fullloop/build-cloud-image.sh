#!/usr/bin/env bash
# Builds the full loop's instance image: a small Debian bookworm with its cloud kernel, systemd,
# cloud-init reading only the ConfigDrive datasource, and GRUB for both firmwares (BIOS boot
# partition + core.img; EFI at the removable path \EFI\BOOT\BOOTX64.EFI), on GPT. Output: a
# compressed qcow2 and its sha256, cached outside the tree under a key of everything that goes in.
# The software RAID suite deploys the same image onto a RAID-1: mdadm in the initramfs and GRUB's mdraid1x; and
# grub-install, grub-mkconfig and /etc/default/grub as Debian's own cloud images have them, for the BIOS opt-in
# (the agent runs the image's grub-install in a chroot of it; docs/raid.md).
#
# Two cached stages: the mmdebstrap root tarball (slow: ~17 min cold on 2 busy cores), keyed by suite,
# variant, packages and hook; the disk image, keyed by the rootfs key and this script.
# Usage: build-cloud-image.sh   (prints the qcow2 path on stdout)   Env: INA_CACHE_DIR (the cache is its fullloop/)
set -euo pipefail
cache=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/fullloop
mkdir -p "$cache"
suite=bookworm variant=minbase
packages="cloud-init grub-efi-amd64-bin grub-pc-bin grub2-common ifupdown initramfs-tools iproute2 isc-dhcp-client linux-image-cloud-amd64 mdadm netbase systemd-sysv udev zstd"
hook='rm -rf "$1"/var/cache/apt/archives/*.deb "$1"/var/lib/apt/lists/*'
rootfs_inputs="suite=$suite variant=$variant packages=$packages hook=$hook"
rootfs_key=$(printf '%s' "$rootfs_inputs" | sha256sum | cut -c1-12)
rootfs="$cache/rootfs-$suite-$rootfs_key.tar"
image_key=$( (echo "$rootfs_key"; cat "$0") | sha256sum | cut -c1-12)
image="$cache/debian-$suite-$image_key.qcow2"
log() { echo "build-cloud-image: $*" >&2; }

if [ -s "$image" ] && [ -s "$image.sha256" ]; then log "cached $image"; echo "$image"; exit 0; fi

# A tarball from an earlier version of this script (other key scheme) is taken only if it is what
# mmdebstrap would make from our inputs: bookworm, the hook applied, and exactly our package selection
# marked manual beyond what the minbase variant itself installs (priority required/important).
adoptable() { # tar
  local t=$1 status auto manual
  [[ $(tar -xOf "$t" ./etc/debian_version 2>/dev/null) == 12.* ]] || return 1
  [ "$(tar -tf "$t" | grep -cE '^\./var/cache/apt/archives/.*\.deb$|^\./var/lib/apt/lists/[^lp]')" = 0 ] || return 1
  status=$(tar -xOf "$t" ./var/lib/dpkg/status)
  auto=$(tar -xOf "$t" ./var/lib/apt/extended_states | awk '/^Package:/{p=$2} /Auto-Installed: 1/{print p}' | sort -u)
  # manual = installed, not auto, not pulled in by the variant (Essential or priority required/important)
  manual=$(printf '%s\n' "$status" | awk '/^Package:/{p=$2;e=0;pr=""} /^Essential: yes/{e=1} /^Priority:/{pr=$2}
      /^$/{ if (p!="" && !e && pr!="required" && pr!="important") print p; p="" }' | sort -u | comm -23 - <(echo "$auto"))
  for p in $packages; do grep -qx "Package: $p" <<<"$status" || return 1; done
  # what remains manual must be one of ours or a library/base the essential set pulls in without apt marking it
  local extra; extra=$(echo "$manual" | comm -23 - <(tr ' ' '\n' <<<"$packages" | sort -u) \
    | grep -Ev '^(lib|gcc-[0-9]+-base$|perl$|perl-modules-|usrmerge$|util-linux-extra$)' || true)
  [ -z "$extra" ] || { log "$t has other packages: $extra"; return 1; }
}

if [ ! -s "$rootfs" ]; then
  for t in "$cache"/rootfs-$suite-*.tar; do
    [ -s "$t" ] && [ "$t" != "$rootfs" ] || continue
    if adoptable "$t"; then log "adopting $t as $rootfs (same suite, hook and package selection)"; ln -f "$t" "$rootfs"; break; fi
  done
fi
if [ ! -s "$rootfs" ]; then
  log "mmdebstrap $suite ($variant + $packages) -> $rootfs (cold: ~17 min on 2 busy cores)"
  t0=$SECONDS
  tmp_tar="$cache/.partial-$rootfs_key.tar"  # mmdebstrap picks tar output by the .tar suffix
  mmdebstrap --variant="$variant" --include="${packages// /,}" \
    --customize-hook="sh -c '$hook' exec \"\$1\"" \
    "$suite" "$tmp_tar" http://deb.debian.org/debian >"$cache/mmdebstrap-$rootfs_key.log" 2>&1 \
    || { tail -20 "$cache/mmdebstrap-$rootfs_key.log" >&2; log "mmdebstrap failed: $cache/mmdebstrap-$rootfs_key.log"; rm -f "$tmp_tar"; exit 1; }
  mv "$tmp_tar" "$rootfs"
  log "rootfs built in $((SECONDS - t0)) s"
fi
echo "$rootfs_inputs" > "$rootfs.inputs"

log "assembling $image"
work=$(mktemp -d /tmp/fullloop-image.XXXXXX)
loops=() mnt="$work/mnt"
cleanup() {
  mountpoint -q "$mnt" && umount "$mnt"
  for l in "${loops[@]}"; do losetup -d "$l"; done
  rm -rf "$work"
}
trap cleanup EXIT
raw="$work/disk.raw"
truncate -s 1536M "$raw"
# 1: BIOS boot (core.img), 2: ESP, 3: root. The agent adds the config drive after these.
sgdisk -Z -n1:2048:+1M -t1:ef02 -c1:bios -n2:0:+64M -t2:ef00 -c2:esp -n3:0:0 -t3:8300 -c3:root "$raw" >/dev/null
# One loop device per partition, by offset: loop partition scanning is not available everywhere.
part_loop() { # number
  local start size; read -r start size < <(partx -g -o START,SECTORS -n "$1" "$raw")
  losetup -f --show -o $((start * 512)) --sizelimit $((size * 512)) "$raw"
}
esp_loop=$(part_loop 2); loops+=("$esp_loop")
root_loop=$(part_loop 3); loops+=("$root_loop")
mkfs.vfat -F 32 -s 1 -n EFI "$esp_loop" >/dev/null
root_uuid=$(cat /proc/sys/kernel/random/uuid)
mkfs.ext4 -q -L root -U "$root_uuid" "$root_loop"
mkdir -p "$mnt"; mount "$root_loop" "$mnt"
tar -xf "$rootfs" -C "$mnt" --numeric-owner
kver=$(ls "$mnt/boot" | sed -n 's/^vmlinuz-//p' | sort -V | tail -1)
echo "UUID=$root_uuid / ext4 errors=remount-ro 0 1" > "$mnt/etc/fstab"
echo debian > "$mnt/etc/hostname"
cat > "$mnt/etc/cloud/cloud.cfg.d/90-fullloop.cfg" <<CFG
# No metadata service here: the config drive the agent wrote is the only source.
datasource_list: [ ConfigDrive, None ]
CFG
# What grub-mkconfig makes of it when the agent installs GRUB for BIOS (software RAID, the opt-in): Debian's
# cloud images' console settings, no menu wait.
cat > "$mnt/etc/default/grub" <<'CFG'
GRUB_DEFAULT=0
GRUB_TIMEOUT=0
GRUB_DISTRIBUTOR=Debian
GRUB_CMDLINE_LINUX_DEFAULT=""
GRUB_CMDLINE_LINUX="console=tty0 console=ttyS0,115200"
GRUB_TERMINAL="console serial"
GRUB_SERIAL_COMMAND="serial --speed=115200"
GRUB_DISABLE_OS_PROBER=true
CFG
mkdir -p "$mnt/boot/grub"
# the modules beside grub.cfg, as grub-install leaves them: whatever the menu loads beyond the core image
cp -r "$mnt/usr/lib/grub/i386-pc" "$mnt/usr/lib/grub/x86_64-efi" "$mnt/boot/grub/"
cat > "$mnt/boot/grub/grub.cfg" <<CFG
set timeout=0
menuentry debian {
  search --no-floppy --fs-uuid --set=root $root_uuid
  linux /boot/vmlinuz-$kver root=UUID=$root_uuid ro console=tty0 console=ttyS0,115200
  initrd /boot/initrd.img-$kver
}
CFG
cat > "$work/early.cfg" <<CFG
search --no-floppy --fs-uuid --set=root $root_uuid
set prefix=(\$root)/boot/grub
configfile \$prefix/grub.cfg
CFG
cp "$work/early.cfg" "$mnt/tmp/early.cfg"
# mdraid1x (with diskfilter): the root on a Linux md array, as the software RAID suite deploys it (the kernel then
# assembles it with the initramfs's mdadm); without an array GRUB finds the root partition as before.
mods="part_gpt part_msdos ext2 fat search search_fs_uuid normal linux configfile echo test mdraid1x"
# UEFI: the removable path, which firmware boots with no NVRAM entry. mtools writes the ESP: the
# builder's kernel need not have vfat.
chroot "$mnt" grub-mkimage -O x86_64-efi -o /tmp/BOOTX64.EFI -c /tmp/early.cfg -p /boot/grub $mods efi_gop
mmd -i "$esp_loop" ::/EFI ::/EFI/BOOT
mcopy -i "$esp_loop" "$mnt/tmp/BOOTX64.EFI" ::/EFI/BOOT/BOOTX64.EFI
# BIOS: core.img in the BIOS boot partition; boot.img in the MBR pointing at it.
chroot "$mnt" grub-mkimage -O i386-pc -o /tmp/core.img -c /tmp/early.cfg -p /boot/grub $mods biosdisk
python3 "$(dirname "$0")/grub-bios-embed.py" "$raw" "$mnt/usr/lib/grub/i386-pc/boot.img" "$mnt/tmp/core.img" 2048
rm -f "$mnt/tmp/early.cfg" "$mnt/tmp/core.img" "$mnt/tmp/BOOTX64.EFI"
sync
umount "$mnt"; for l in "${loops[@]}"; do losetup -d "$l"; done; loops=()
qemu-img convert -c -O qcow2 "$raw" "$image.tmp"
(cd "$(dirname "$image")" && sha256sum "$(basename "$image.tmp")" | sed 's/\.tmp$//') > "$image.sha256"
mv "$image.tmp" "$image"
log "built $image ($(stat -c %s "$image") bytes)"
echo "$image"
