# Sourced by both Ironic harnesses' start.sh (21.4 from bookworm, the newest from a sid chroot), after they
# started their daemons, each with a pid file in $RUN. Needs RUN, HERE (its stop.sh), API_PORT, HTTP_URL.
# ironic_wait_up API_VERSION LABEL: waits until the API lists the fake-hardware driver (the conductor
# registered), writes $RUN/api-url, http-url and env (for baremetal), prints the URL and exits 0; exits 1
# with the dead daemon's last log lines, or after 180 s, having stopped everything.
ironic_wait_up() {
  local version=$1 label=$2 url="http://127.0.0.1:$API_PORT" t0 pf
  t0=$(date +%s%N)
  for _ in $(seq 1 720); do
    for pf in "$RUN"/*.pid; do
      kill -0 "$(cat "$pf")" 2>/dev/null || {
        echo "start.sh: $(basename "$pf" .pid) exited; last log lines:" >&2
        tail -30 "$RUN/log/$(basename "$pf" .pid).log" "$RUN/log/$(basename "$pf" .pid).stdout" >&2 2>/dev/null || true
        "$HERE/stop.sh" "$RUN" >&2 || true
        exit 1
      }
    done
    if curl -fsS -H 'X-OpenStack-Ironic-API-Version: 1.31' "$url/v1/drivers" 2>/dev/null | grep -q '"fake-hardware"'; then
      echo "$url" > "$RUN/api-url"
      echo "$HTTP_URL" > "$RUN/http-url"
      printf 'export OS_AUTH_TYPE=none\nexport OS_ENDPOINT=%s\nexport OS_BAREMETAL_API_VERSION=%s\n' "$url" "$version" \
        > "$RUN/env"
      echo "start.sh: $label up at $url after $(( ($(date +%s%N) - t0) / 1000000 )) ms" >&2
      echo "$url"
      exit 0
    fi
    sleep 0.25
  done
  echo "start.sh: Ironic did not come up within 180 s; logs in $RUN/log" >&2
  "$HERE/stop.sh" "$RUN" >&2 || true
  exit 1
}
