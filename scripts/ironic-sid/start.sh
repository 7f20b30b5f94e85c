#!/usr/bin/env bash
# Starts the newest Ironic (Debian sid, from the chroot ensure-chroot.sh builds) on 127.0.0.1 from a run
# directory under /tmp: writes RUN_DIR/ironic.conf, creates the sqlite schema, starts each daemon in its own
# mount + PID namespace (in-root.sh) and waits until the API lists fake-hardware. The conductor's namespace
# also runs a static HTTP server on [deploy]http_root, which `image_download_source=local` serves images from.
#
# Usage: start.sh RUN_DIR
# Env:   IRONIC_MODE=single|split   one `ironic` process, or ironic-api + ironic-conductor over JSON-RPC
#        IRONIC_API_PORT=N          default: a free port (as every other port)
#        IRONIC_REQUIRE_TLS=true|false (default true: Ironic's own default), IRONIC_FAST_TRACK (default true)
#        IRONIC_DOWNLOAD_SOURCE=http|local (default http), IRONIC_FORCE_RAW=true|false (default true)
#        IRONIC_HEARTBEAT_TIMEOUT=S (default 10), IRONIC_CALLBACK_TIMEOUT=S (default 300)
#        IRONIC_EXTRA_CONF=FILE     appended to ironic.conf (e.g. [inspector] hooks, [auto_discovery])
# Writes RUN_DIR/api-url, RUN_DIR/http-url and RUN_DIR/env (OS_* for `baremetal`); prints the API URL.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${1:?usage: start.sh RUN_DIR}
MODE=${IRONIC_MODE:-single}
case "$MODE" in single|split) ;; *) echo "start.sh: IRONIC_MODE must be single or split, not $MODE" >&2; exit 2;; esac

ROOT=$("$HERE/ensure-chroot.sh")
mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
case "$RUN" in /tmp/*) ;; *) echo "start.sh: RUN_DIR must be under /tmp (bind-mounted into the chroot), not $RUN" >&2; exit 2;; esac
mkdir -p "$RUN"/{log,state,tmp,locks,deploy-logs,httpboot,certificates}
if [ -s "$RUN/api-url" ]; then
  echo "start.sh: $RUN already has an Ironic (run stop.sh first)" >&2
  exit 1
fi

free_port() {
  python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
API_PORT=${IRONIC_API_PORT:-$(free_port)}
RPC_PORT=$(free_port)
HTTP_PORT=$(free_port)
RPC=none; [ "$MODE" = split ] && RPC=json-rpc
HTTP_URL="http://127.0.0.1:$HTTP_PORT"

sed -e "s#@RUN@#$RUN#g" -e "s#@RPC@#$RPC#g" -e "s#@API_PORT@#$API_PORT#g" -e "s#@JSON_RPC_PORT@#$RPC_PORT#g" \
    -e "s#@FAST_TRACK@#${IRONIC_FAST_TRACK:-true}#g" -e "s#@REQUIRE_TLS@#${IRONIC_REQUIRE_TLS:-true}#g" \
    -e "s#@HEARTBEAT_TIMEOUT@#${IRONIC_HEARTBEAT_TIMEOUT:-10}#g" \
    -e "s#@CALLBACK_TIMEOUT@#${IRONIC_CALLBACK_TIMEOUT:-300}#g" \
    -e "s#@DOWNLOAD_SOURCE@#${IRONIC_DOWNLOAD_SOURCE:-http}#g" -e "s#@FORCE_RAW@#${IRONIC_FORCE_RAW:-true}#g" \
    -e "s#@HTTP_URL@#$HTTP_URL#g" \
    "$HERE/ironic.conf.in" > "$RUN/ironic.conf"
if [ -n "${IRONIC_EXTRA_CONF:-}" ]; then cat "$IRONIC_EXTRA_CONF" >> "$RUN/ironic.conf"; fi

PY="/usr/bin/env PYTHONWARNINGS=ignore /usr/bin/python3"
if [ ! -s "$RUN/state/ironic.sqlite" ]; then
  "$HERE/in-root.sh" "$ROOT" $PY /usr/bin/ironic-dbsync --config-file "$RUN/ironic.conf" create_schema \
    > "$RUN/log/dbsync.log" 2>&1 \
    || { tail -20 "$RUN/log/dbsync.log" >&2; echo "start.sh: ironic-dbsync failed" >&2; exit 1; }
fi

# Each daemon is PID 1 of its own namespace under its own session (setsid): stop.sh ends the session, and the
# kernel ends whatever the daemon forked when it goes.
start_daemon() { # name [http]
  local name=$1 http=${2:-}
  local cmd="exec $PY /usr/bin/$name --config-file $RUN/ironic.conf --log-file $RUN/log/$name.log"
  [ -n "$http" ] && cmd="$PY -m http.server --bind 127.0.0.1 --directory $RUN/httpboot $HTTP_PORT \
    >$RUN/log/http.log 2>&1 & $cmd"
  setsid "$HERE/in-root.sh" "$ROOT" /bin/bash -c "$cmd" > "$RUN/log/$name.stdout" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}
if [ "$MODE" = single ]; then
  start_daemon ironic http
else
  start_daemon ironic-conductor http
  start_daemon ironic-api
fi

# shellcheck source=../lib/ironic-wait-up.sh
. "$HERE/../lib/ironic-wait-up.sh"
ironic_wait_up 1.115 "Ironic $(chroot "$ROOT" dpkg-query -W -f='${Version}' python3-ironic) ($MODE)"
