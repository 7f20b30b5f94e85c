#!/usr/bin/env bash
# The full loop's Debian packages, installed when missing: the BMC (python3-pyghmi), ipmitool for Ironic's
# ipmitool driver, firmware for both scenarios, genisoimage for the config drive Ironic builds, and the instance
# image builder's tools (build-cloud-image.sh). Debian's Ironic comes from scripts/ironic-standalone.
set -euo pipefail
need=()
for p in python3-pyghmi ipmitool ovmf ipxe-qemu genisoimage mmdebstrap mtools dosfstools gdisk qemu-utils; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
done
[ ${#need[@]} -eq 0 ] ||
  "$(dirname "$0")/../lib/apt-get.sh" -o DPkg::Lock::Timeout=900 install -y --no-install-recommends "${need[@]}" >&2
