#!/usr/bin/env bash
# Starts a standalone Ironic on 127.0.0.1 from a run directory: writes RUN_DIR/ironic.conf, creates the
# sqlite schema once, starts Debian's Ironic with /usr/bin/python3 and waits until the API answers and
# the conductor has registered fake-hardware.
#
# Usage: start.sh RUN_DIR
# Env:   IRONIC_MODE=single|split   single `ironic` process, or ironic-api + ironic-conductor over JSON-RPC
#        IRONIC_API_PORT=N          default: a free ephemeral port
#        IRONIC_FAST_TRACK=true|false (default true), IRONIC_REQUIRE_TLS=true|false (default false)
#        IRONIC_HEARTBEAT_TIMEOUT=S (default 10), IRONIC_CALLBACK_TIMEOUT=S (default 300)
#        IRONIC_DOWNLOAD_SOURCE=http|local (default http), IRONIC_FORCE_RAW=true|false (default true)
# Also serves [deploy]http_root at [deploy]http_url (a static HTTP server on a free port).
# Writes RUN_DIR/api-url, RUN_DIR/http-url and RUN_DIR/env (OS_* variables for the `baremetal` CLI); prints the API URL.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
RUN=${1:?usage: start.sh RUN_DIR}
MODE=${IRONIC_MODE:-single}
PY=/usr/bin/python3
case "$MODE" in single|split) ;; *) echo "start.sh: IRONIC_MODE must be single or split, not $MODE" >&2; exit 2;; esac

mkdir -p "$RUN"
RUN=$(cd "$RUN" && pwd)
mkdir -p "$RUN"/{log,state,tmp,locks,deploy-logs,httpboot,certificates}

if [ -s "$RUN/api-url" ]; then
  echo "start.sh: $RUN already has an Ironic (run stop.sh first)" >&2
  exit 1
fi

free_port() {
  "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}
API_PORT=${IRONIC_API_PORT:-$(free_port)}
RPC_PORT=$(free_port)
HTTP_PORT=$(free_port)
HTTP_URL="http://127.0.0.1:$HTTP_PORT"
RPC=none; [ "$MODE" = split ] && RPC=json-rpc

sed -e "s#@RUN@#$RUN#g" -e "s#@RPC@#$RPC#g" -e "s#@API_PORT@#$API_PORT#g" -e "s#@JSON_RPC_PORT@#$RPC_PORT#g" \
    -e "s#@FAST_TRACK@#${IRONIC_FAST_TRACK:-true}#g" -e "s#@REQUIRE_TLS@#${IRONIC_REQUIRE_TLS:-false}#g" \
    -e "s#@HEARTBEAT_TIMEOUT@#${IRONIC_HEARTBEAT_TIMEOUT:-10}#g" \
    -e "s#@CALLBACK_TIMEOUT@#${IRONIC_CALLBACK_TIMEOUT:-300}#g" -e "s#@HTTP_URL@#$HTTP_URL#g" \
    -e "s#@DOWNLOAD_SOURCE@#${IRONIC_DOWNLOAD_SOURCE:-http}#g" -e "s#@FORCE_RAW@#${IRONIC_FORCE_RAW:-true}#g" \
    "$HERE/ironic.conf.in" > "$RUN/ironic.conf"

if [ ! -s "$RUN/state/ironic.sqlite" ]; then
  "$PY" /usr/bin/ironic-dbsync --config-file "$RUN/ironic.conf" create_schema > "$RUN/log/dbsync.log" 2>&1 \
    || { tail -20 "$RUN/log/dbsync.log" >&2; echo "start.sh: ironic-dbsync failed" >&2; exit 1; }
fi

# Each daemon gets its own session (setsid), so stop.sh can end it with every worker it forked.
start_daemon() { # name
  local name=$1
  setsid "$PY" "/usr/bin/$name" --config-file "$RUN/ironic.conf" --log-file "$RUN/log/$name.log" \
    > "$RUN/log/$name.stdout" 2>&1 < /dev/null &
  echo $! > "$RUN/$name.pid"
}
# [deploy]http_url: a static server on http_root (ipxe configs, and images with image_download_source=local)
setsid "$PY" -m http.server --bind 127.0.0.1 --directory "$RUN/httpboot" "$HTTP_PORT" > "$RUN/log/http.log" 2>&1 < /dev/null &
echo $! > "$RUN/http.pid"
if [ "$MODE" = single ]; then
  start_daemon ironic
else
  start_daemon ironic-conductor
  start_daemon ironic-api
fi

# shellcheck source=../lib/ironic-wait-up.sh
. "$HERE/../lib/ironic-wait-up.sh"
ironic_wait_up 1.82 "Ironic ($MODE)"
