#!/usr/bin/env bash
# Stops the Ironic daemons start.sh started in RUN_DIR (by their pid files), with every process in
# their sessions, and nothing else.
set -uo pipefail
RUN=${1:?usage: stop.sh RUN_DIR}
for pf in "$RUN"/ironic.pid "$RUN"/ironic-api.pid "$RUN"/ironic-conductor.pid "$RUN"/http.pid; do
  [ -f "$pf" ] || continue
  pid=$(cat "$pf")
  # the daemon is its session's leader (setsid), so -pid is its process group
  kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  for _ in $(seq 1 40); do kill -0 "$pid" 2>/dev/null || break; sleep 0.25; done
  kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$pf"
done
rm -f "$RUN/api-url" "$RUN/http-url"
