#!/usr/bin/env bash
# Installs Debian's Ironic (API, conductor, client) when missing, without ever letting the packaged
# services start: they would bind 0.0.0.0 with keystone auth. Prints how long the install took.
# `npm run test:ironic` calls this before the suite; the suite starts its own Ironic per test file
# with start.sh and stops it with stop.sh.
set -euo pipefail

PKGS=(python3-ironic ironic-api ironic-conductor python3-ironicclient)
SERVICES=(ironic-api ironic-conductor)
APT_GET=$(cd "$(dirname "$0")/.." && pwd)/lib/apt-get.sh

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "ironic-standalone: need root to apt-get install ${missing[*]}" >&2
  exit 1
fi

# policy-rc.d exit 101 = "action forbidden": invoke-rc.d in the postinst scripts then starts nothing.
POLICY=/usr/sbin/policy-rc.d
backup=""
if [ -e "$POLICY" ]; then
  backup=$(mktemp)
  cp -p "$POLICY" "$backup"
fi
restore_policy() {
  if [ -n "$backup" ]; then mv -f "$backup" "$POLICY"; else rm -f "$POLICY"; fi
}
trap restore_policy EXIT
printf '#!/bin/sh\nexit 101\n' > "$POLICY"
chmod 0755 "$POLICY"

log=$(mktemp /tmp/ironic-install.XXXXXX.log)
t0=$(date +%s)
echo "ironic-standalone: installing ${missing[*]} (log: $log)" >&2
export DEBIAN_FRONTEND=noninteractive
apt_install() {
  "$APT_GET" -o DPkg::Lock::Timeout=600 install -y --no-install-recommends "${missing[@]}" >>"$log" 2>&1
}
if ! apt_install; then
  "$APT_GET" -o DPkg::Lock::Timeout=600 update >>"$log" 2>&1
  apt_install || { tail -30 "$log" >&2; echo "ironic-standalone: apt-get install failed, see $log" >&2; exit 1; }
fi

# Belt and braces for machines with a service manager that ignored policy-rc.d.
for s in "${SERVICES[@]}"; do
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    systemctl disable --now "$s" >/dev/null 2>&1 || true
  elif [ -x "/etc/init.d/$s" ]; then
    "/etc/init.d/$s" stop >/dev/null 2>&1 || true
    update-rc.d "$s" disable >/dev/null 2>&1 || true
  fi
done

echo "ironic-standalone: installed $(dpkg-query -W -f='${Version}' python3-ironic) in $(( $(date +%s) - t0 ))s" >&2
