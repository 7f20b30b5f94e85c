#!/usr/bin/env bash
# npm run test:fleet: a real multi-conductor Ironic 39 (sid's, scripts/ironic-sid) driving FLEET_NODES agents
# at once, all inside network namespaces this script makes (net.sh). For each wave (force_raw_images=true,
# then false) it starts a fresh stack: MariaDB, the image source (nginx), one ironic-api and two
# ironic-conductors (hosts fleet-c1 and fleet-c2, JSON-RPC, each with its own nginx on [deploy]http_root), then
# runs fleet.ts in the ctl namespace, which starts the agents (the shipped bundle, each in its own namespace
# with its own MAC and loop device), enrolls, deploys and undeploys them, and prints the wave's report. On any
# exit, every process in the namespaces is ended, the namespaces deleted, the loop devices fleet.ts recorded
# detached and the run directory removed (FLEET_KEEP=1 keeps the directory, for its logs).
# Env: FLEET_NODES (default 24), FLEET_WAVES (default "true false": the force_raw_images of each wave),
#      FLEET_FAULTS (default "lock-conflict image-stall conductor-loss", after the last wave; empty for none), FLEET_IMAGE_MIB (default 64),
#      FLEET_REPORT (a file the report is also appended to),
#      SUITE_REPORT (.ci/run: the waves that passed and failed are written there as vitest's counts, one test a wave).
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
SID=$REPO/scripts/ironic-sid
cd "$REPO"
[ "$(id -u)" = 0 ] || { echo "fleet: needs root (namespaces, loop devices, the chroot)" >&2; exit 1; }
bash scripts/ensure-deps.sh fleet
ROOT=$(bash "$SID/ensure-chroot.sh")
export FLEET_NODES=${FLEET_NODES:-24}
WAVES=${FLEET_WAVES:-true false}
FLEET_NS="inafl$$"
waves_passed=0
RUN=$(mktemp -d /tmp/ina-fleet-XXXXXX)
export RUN FLEET_NS
# shellcheck source=net.sh
. "$HERE/net.sh"
# shellcheck source=stack.sh
. "$HERE/stack.sh"

# Detaches the loop devices fleet.ts recorded ("DEV FILE" lines) that it did not detach itself: only a device
# still backed by that file, since a number freed may have been taken by another program since.
fleet_loops_down() {
  local dev file
  [ -f "$RUN/loops" ] || return 0
  while read -r dev file; do
    if [ "$(losetup -n -O BACK-FILE "$dev" 2>/dev/null | sed 's/ *$//')" = "$file" ]; then
      losetup -d "$dev" || echo "fleet: could not detach $dev ($file)" >&2
    fi
    case "$file" in /tmp/ina-loop-*/disk.img) rm -rf "${file%/disk.img}" ;; esac
  done < "$RUN/loops"
  rm -f "$RUN/loops"
}

cleanup() {
  local rc=$?
  set +e
  fleet_net_down
  fleet_loops_down
  if [ -n "${FLEET_KEEP:-}" ]; then echo "fleet: run directory kept: $RUN" >&2; else rm -rf "$RUN"; fi
  echo "fleet: namespaces $FLEET_NS-*, their processes and loop devices removed" >&2
  # the verdict is the last line
  if [ "$rc" = 0 ]; then echo "fleet: PASS" >&2; else echo "fleet: FAIL (exit $rc)" >&2; fi
  if [ -n "${SUITE_REPORT:-}" ]; then
    local failed=0
    [ "$rc" = 0 ] || failed=1
    printf '{"numPassedTests":%d,"numFailedTests":%d,"numPendingTests":0,"numTodoTests":0,"success":%s}\n' \
      "$waves_passed" "$failed" "$([ "$rc" = 0 ] && echo true || echo false)" > "$SUITE_REPORT"
  fi
  exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "fleet: bundling the agent as the ramdisk ships it" >&2
bash scripts/bundle.sh "$RUN/bundle" fleet >&2
# the image checksum's addon goes beside agent.cjs, as image-build/build.sh puts it
bash scripts/build-addon.sh "$RUN/bundle/hash-addon.node" >&2
printf '127.0.0.1 localhost\n%s fleet-api\n10.47.0.11 fleet-c1\n10.47.0.12 fleet-c2\n' "$API_IP" > "$RUN/hosts"

wave_up() { # force_raw
  fleet_net_up
  fleet_ns_add ctl "$API_IP"
  fleet_ns_add c1 10.47.0.11
  fleet_ns_add c2 10.47.0.12
  fleet_mariadb_up
  fleet_nginx_up source "$(fleet_ns ctl)" "$API_IP" "$RUN/source"
  fleet_ironic_conf fleet-api "$API_IP" "$1"
  for c in 1 2; do
    fleet_ironic_conf "fleet-c$c" "10.47.0.1$c" "$1"
    fleet_nginx_up "c$c" "$(fleet_ns "c$c")" "10.47.0.1$c" "$RUN/fleet-c$c/httpboot"
  done
  ip netns exec "$(fleet_ns ctl)" "$SID/in-root.sh" "$ROOT" /usr/bin/env PYTHONWARNINGS=ignore /usr/bin/python3 \
    /usr/bin/ironic-dbsync --config-file "$RUN/fleet-api/ironic.conf" create_schema \
    > "$RUN/fleet-api/log/dbsync.log" 2>&1 || { tail -20 "$RUN/fleet-api/log/dbsync.log" >&2; return 1; }
  fleet_ironic_up fleet-api "$(fleet_ns ctl)" ironic-api
  fleet_ironic_up fleet-c1 "$(fleet_ns c1)" ironic-conductor
  fleet_ironic_up fleet-c2 "$(fleet_ns c2)" ironic-conductor
  local i
  for i in $(seq "$FLEET_NODES"); do
    fleet_agent_ns "$i"
  done
}

status=0
for force_raw in $WAVES; do
  echo "fleet: wave with force_raw_images=$force_raw, $FLEET_NODES nodes" >&2
  : > "$RUN/pids"
  wave_up "$force_raw"
  # in the background and waited for, so that a TERM or INT reaches the trap at once (cleanup ends the driver)
  # the faults after the last wave only
  faults=""; [ "$force_raw" = "${WAVES##* }" ] && faults=${FLEET_FAULTS-lock-conflict image-stall conductor-loss}
  FLEET_FAULTS=$faults FLEET_FORCE_RAW=$force_raw ip netns exec "$(fleet_ns ctl)" scripts/node.sh --import tsx "$HERE/fleet.ts" &
  rc=0; wait $! || rc=$?
  echo "fleet: wave force_raw_images=$force_raw: driver exit $rc" >&2
  [ "$rc" = 0 ] || status=1
  [ "$status" = 0 ] || break
  waves_passed=$((waves_passed + 1))
  fleet_net_down
  fleet_loops_down
  # a fresh database and fresh conductors for the next wave (FLEET_KEEP: this wave's logs kept in wave-<force_raw>)
  if [ -n "${FLEET_KEEP:-}" ]; then
    mkdir -p "$RUN/wave-$force_raw"
    mv "$RUN"/fleet-* "$RUN"/nginx-* "$RUN/agents" "$RUN/wave-$force_raw/"
  fi
  rm -rf "$RUN/mariadb" "$RUN"/fleet-* "$RUN"/nginx-* "$RUN/agents" "$RUN/source"
done
exit $status
