#!/usr/bin/env bash
# The Ironic conformance suite (test/ironic/) against one real conductor, picked by INA_IRONIC:
#   21.4 (default)  Debian bookworm's Ironic from the host's packages (scripts/ironic-standalone); the run holds
#                   /run/lock/ina-ironic.lock, the lock every user of that harness takes, unless an ancestor (e.g.
#                   `flock /run/lock/ina-ironic.lock npm run test:ironic`) already holds it;
#   sid             Debian sid's newest Ironic from a cached chroot (scripts/ironic-sid), on free ports, no lock.
# Arguments go to vitest (a file name runs one scenario file). Prints the suite's time.
set -euo pipefail
cd "$(dirname "$0")/.."
export INA_IRONIC=${INA_IRONIC:-21.4}
LOCK=/run/lock/ina-ironic.lock # not /tmp, which tests leave as they found it
mkdir -p /run/lock

ancestor_holds_lock() {
  [ -e "$LOCK" ] || return 1
  local id holders p dev ino
  read -r dev ino < <(stat -c '%D %i' "$LOCK")
  dev=$((16#$dev))
  id=$(printf '%02x:%02x:%s' "$(( (dev >> 8) & 0xfff ))" "$(( (dev & 0xff) | ((dev >> 12) & 0xfff00) ))" "$ino")
  holders=$(awk -v id="$id" '$2 == "FLOCK" && $6 == id {print $5}' /proc/locks)
  p=$$
  while [ "$p" -gt 1 ]; do
    grep -qx "$p" <<<"$holders" && return 0
    # the parent from status, not stat: a command name with spaces ("(npm run test:ir)") shifts stat's fields
    p=$(awk '/^PPid:/{print $2}' "/proc/$p/status" 2>/dev/null) || return 1
  done
  return 1
}

bash scripts/ensure-deps.sh
case "$INA_IRONIC" in
  21.4) bash scripts/ironic-standalone/ensure-ironic.sh ;;
  sid) bash scripts/ironic-sid/ensure-chroot.sh >/dev/null ;;
  *) echo "test-ironic: INA_IRONIC must be 21.4 or sid, not $INA_IRONIC" >&2; exit 2 ;;
esac
run=(scripts/node.sh node_modules/vitest/vitest.mjs run --config test/ironic/vitest.config.ts "$@")
start=$SECONDS
rc=0
if [ "$INA_IRONIC" = 21.4 ] && ! ancestor_holds_lock; then
  flock "$LOCK" "${run[@]}" || rc=$?
else
  "${run[@]}" || rc=$?
fi
echo "test-ironic: Ironic $INA_IRONIC suite took $((SECONDS - start)) s (exit $rc)"
exit $rc
