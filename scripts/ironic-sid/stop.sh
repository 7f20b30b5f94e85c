#!/usr/bin/env bash
# Stops the Ironic daemons start.sh started in RUN_DIR, and nothing else. Each pid file names an `unshare`
# whose child is PID 1 of the daemon's PID namespace: when that process ends, the kernel ends every process
# in the namespace (workers, the HTTP server), so the daemon gets TERM, then KILL after 10 s.
set -uo pipefail
RUN=${1:?usage: stop.sh RUN_DIR}
for pf in "$RUN"/ironic.pid "$RUN"/ironic-api.pid "$RUN"/ironic-conductor.pid; do
  [ -f "$pf" ] || continue
  pid=$(cat "$pf")
  init=$(cat "/proc/$pid/task/$pid/children" 2>/dev/null | awk '{print $1}')
  if [ -n "$init" ]; then
    kill -TERM "$init" 2>/dev/null
    for _ in $(seq 1 40); do kill -0 "$init" 2>/dev/null || break; sleep 0.25; done
    kill -KILL "$init" 2>/dev/null
  fi
  kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null
  for _ in $(seq 1 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  rm -f "$pf"
done
rm -f "$RUN/api-url" "$RUN/http-url"
