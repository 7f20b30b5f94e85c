#!/usr/bin/env bash
# Builds (cold, about 11 min) or reuses the Debian sid chroot that runs the newest Ironic: mmdebstrap from
# Debian's archive with python3-ironic pinned, cached in $INA_CACHE_DIR/ironic-sid/root (INA_CACHE_DIR: default
# /var/cache/ironic-node-agent).
# A chroot is reused when its stamp (ROOT/.ina-stamp: suite and package list) matches this script's and
# dpkg inside it reports the pinned version; otherwise it is built anew beside it and swapped in.
# The archive this project reaches may be a frozen mirror whose Release file has expired, hence
# Check-Valid-Until false (the signatures are still checked). Prints the chroot's path.
# Env: INA_CACHE_DIR, INA_SID_MIRROR (default http://deb.debian.org/debian).
set -euo pipefail
CACHE=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/ironic-sid
MIRROR=${INA_SID_MIRROR:-http://deb.debian.org/debian}
IRONIC_VERSION=1:39.0.0-6
PKGS=(python3-ironic="$IRONIC_VERSION" ironic-common="$IRONIC_VERSION" python3-ironicclient qemu-utils)
STAMP="sid ${PKGS[*]}"
ROOT=$CACHE/root

usable() { # root
  [ -f "$1/.ina-stamp" ] && [ "$(cat "$1/.ina-stamp")" = "$STAMP" ] &&
    [ "$(chroot "$1" dpkg-query -W -f='${Version}' python3-ironic 2>/dev/null)" = "$IRONIC_VERSION" ] &&
    [ -x "$1/usr/bin/ironic" ] && [ -x "$1/usr/bin/qemu-img" ]
}

if [ "$(id -u)" -ne 0 ]; then echo "ironic-sid: need root (chroot, mmdebstrap)" >&2; exit 1; fi
if usable "$ROOT"; then echo "$ROOT"; exit 0; fi

mkdir -p "$CACHE"
exec 9>"$CACHE/.build.lock"
flock 9
# another run may have built it while this one waited for the lock
if usable "$ROOT"; then echo "$ROOT"; exit 0; fi

if ! command -v mmdebstrap >/dev/null; then
  "$(dirname "$0")/../lib/apt-get.sh" -o DPkg::Lock::Timeout=900 install -y --no-install-recommends mmdebstrap >&2
fi
NEW=$CACHE/root.new
rm -rf "$NEW"
t0=$(date +%s)
echo "ironic-sid: building the sid chroot with ${PKGS[*]} (log: $CACHE/build.log, about 11 min)" >&2
if ! mmdebstrap --variant=apt --include="$(IFS=,; echo "${PKGS[*]}")" \
     --aptopt='APT::Install-Recommends "false"' \
     --aptopt='Acquire::Check-Valid-Until "false"' \
     --dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
     sid "$NEW" "$MIRROR" >"$CACHE/build.log" 2>&1; then
  tail -30 "$CACHE/build.log" >&2
  echo "ironic-sid: mmdebstrap failed (is $IRONIC_VERSION still in sid? see $CACHE/build.log)" >&2
  rm -rf "$NEW"
  exit 1
fi
echo "$STAMP" >"$NEW/.ina-stamp"
usable "$NEW" || { echo "ironic-sid: the new chroot lacks ironic $IRONIC_VERSION or qemu-img" >&2; exit 1; }
if [ -e "$ROOT" ]; then rm -rf "$ROOT.old"; mv "$ROOT" "$ROOT.old"; fi
mv "$NEW" "$ROOT"
rm -rf "$ROOT.old"
echo "ironic-sid: built in $(( $(date +%s) - t0 )) s" >&2
echo "$ROOT"
