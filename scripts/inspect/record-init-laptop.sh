#!/bin/sh
# PID 1 of the laptop-like recording VM (scripts/inspect/record-in-vm.ts --profile laptop), in place of the
# ramdisk's /init: the ramdisk's drivers, then xHCI, USB storage and HID, e1000e and mac80211_hwsim with one
# radio (wlan0), the wired NIC up with an address, then the recorder. The recorded tree leaves the VM as a tar
# written to the USB stick (/dev/sda), so the stick is recorded blank, as a laptop's inserted stick would be.
. /record/boot.sh
for ko in $(cat /record/modules); do
  [ -e "/sys/module/$(basename "$ko" .ko | tr - _)" ] && continue
  case "$ko" in
    mac80211_hwsim.ko) insmod "/record/$ko" radios=1 || say "insmod $ko failed" ;;
    *) insmod "/record/$ko" || say "insmod $ko failed" ;;
  esac
done
hostname rec-laptop
ip link set lo up
for i in $(seq 1 30); do [ -b /dev/sda ] && [ -e /sys/class/net/wlan0 ] && break; sleep 1; done
sleep 3
ip link set eth0 up
ip addr add 192.0.2.14/24 dev eth0
ip -6 addr add 2001:db8:14::14/64 dev eth0
ip link set wlan0 up
sleep 3
ip -o link > /dev/console
ls -l /sys/class/net/ /sys/bus/usb/devices/ > /dev/console
[ -d /sys/firmware/efi ] && say "booted through UEFI"
# Without the block device tar would write a file in /dev and the recording would be lost.
[ -b /dev/sda ] || say "no USB stick at /dev/sda"
[ -b /dev/sda ] && node /record/record.mjs /tmp/tree > /dev/console 2>&1 && tar -C /tmp/tree -cf /dev/sda . && sync && say done
poweroff -f
