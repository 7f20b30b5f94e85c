#!/bin/sh
# PID 1 of the recording VM (scripts/inspect/record-in-vm.ts), in place of the ramdisk's /init: the
# ramdisk's drivers, then bonding and 8021q, a bond of both NICs with VLAN 100 on it, then the recorder.
# The recorded tree leaves the VM as a tar written to the last virtio disk (/dev/vdb).
. /record/boot.sh
for ko in $(cat /record/modules); do insmod "/record/$ko" || say "insmod $ko failed"; done
hostname rec-bond-vlan
ip link set lo up
# Loading bonding made bond0; the mode and the link monitor can only change while it has no members.
echo active-backup > /sys/class/net/bond0/bonding/mode
echo 100 > /sys/class/net/bond0/bonding/miimon
for nic in eth0 eth1; do
  ip link set "$nic" down
  echo "+$nic" > /sys/class/net/bond0/bonding/slaves
done
ip link set bond0 up
ip addr add 192.0.2.10/24 dev bond0
ip link add link bond0 name bond0.100 type vlan id 100 || vconfig add bond0 100
ip link set bond0.100 up
ip addr add 198.51.100.10/24 dev bond0.100
ip -6 addr add 2001:db8:100::10/64 dev bond0.100
sleep 4
ip -o link > /dev/console
cat /proc/net/bonding/bond0 > /dev/console
node /record/record.mjs /tmp/tree > /dev/console 2>&1 && tar -C /tmp/tree -cf /dev/vdb . && sync && say done
poweroff -f
