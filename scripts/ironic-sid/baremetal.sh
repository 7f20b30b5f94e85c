#!/usr/bin/env bash
# The sid chroot's own `baremetal` CLI (python3-ironicclient 6.x, which knows servicing, disable_power_off and
# the other commands of API versions the host's client predates), with the caller's OS_* environment.
# Paths under /tmp are the same inside the chroot.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/ironic-sid/root
cd /tmp
exec "$HERE/in-root.sh" "$ROOT" /usr/bin/env PYTHONWARNINGS=ignore /usr/bin/python3 /usr/bin/baremetal "$@"
