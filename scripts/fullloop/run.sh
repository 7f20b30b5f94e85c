#!/usr/bin/env bash
# npm run test:fullloop: builds (or takes from cache) the ramdisk and the instance image, then runs the
# full-loop suite inside a network namespace made for this run, holding only lo with 127.0.0.1 and
# 10.0.2.2/32 (the address QEMU user-net shows the guest for the host): Ironic, the image server,
# the BMC and QEMU all live there, nothing can reach another address, and no port clashes with the
# machine's. On any exit every process in the namespace is ended and the namespace deleted.
# Env: FULLLOOP_FIRMWARES="uefi bios" (default both, UEFI first).  Extra arguments go to vitest.
set -euo pipefail
repo=$(cd "$(dirname "$0")/../.." && pwd)
cd "$repo"
[ "$(id -u)" = 0 ] || { echo "run.sh: needs root (network namespace, loop devices)" >&2; exit 1; }
bash scripts/ironic-standalone/ensure-ironic.sh
bash scripts/fullloop/ensure-packages.sh
# The e2e suite's plugin folder, so that the two suites boot one build of the ramdisk (test/e2e/setup.ts).
INA_HARDWARE_MANAGERS=test/e2e/hardware-managers bash image-build/build.sh >&2
export FULLLOOP_IMAGE; FULLLOOP_IMAGE=$(bash scripts/fullloop/build-cloud-image.sh)
ns="ina-fullloop-$$"
cleanup() {
  local pids
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  # A process may end between the listing and the kill: under set -e that must not end the cleanup.
  [ -n "$pids" ] && { kill $pids 2>/dev/null || true; }
  for _ in $(seq 50); do [ -z "$(ip netns pids "$ns" 2>/dev/null)" ] && break; sleep 0.2; done
  pids=$(ip netns pids "$ns" 2>/dev/null || true)
  [ -n "$pids" ] && { kill -9 $pids 2>/dev/null || true; }
  ip netns del "$ns" 2>/dev/null || true
  echo "run.sh: namespace $ns and its processes removed" >&2
}
trap cleanup EXIT
trap 'exit 130' INT TERM
ip netns add "$ns"
ip -n "$ns" link set lo up
ip -n "$ns" addr add 10.0.2.2/32 dev lo
ip netns exec "$ns" scripts/node.sh node_modules/vitest/vitest.mjs run --config test/fullloop/vitest.config.ts "$@"
