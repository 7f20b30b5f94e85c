# Sourced by both recording VMs' /init (record-init.sh, record-init-laptop.sh): the kernel filesystems, the
# console log helper, and the drivers the ramdisk's own /init would load (by modalias, then its list).
export PATH=/usr/sbin:/usr/bin
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
say() { echo "record: $*" > /dev/console; }
for bus in pci virtio; do
  for f in /sys/bus/$bus/devices/*/modalias; do [ -e "$f" ] && read -r a < "$f" && echo "$a"; done | xargs modprobe -q -a
done
xargs modprobe -q -a < /etc/ina/modules
