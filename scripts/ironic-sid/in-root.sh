#!/usr/bin/env bash
# Runs a command inside the sid chroot, in its own mount and PID namespaces: /proc is the namespace's own,
# /dev and the host's /tmp are bind-mounted (run directories, images and certificates keep their host
# paths), nothing is mounted outside the namespace and the cached chroot is not written. When the command
# (PID 1 of the namespace) ends, the kernel ends every process it left. The network is the host's, so the
# API answers on the host's loopback.
# Usage: in-root.sh ROOT CMD [ARGS...]
set -euo pipefail
ROOT=${1:?usage: in-root.sh ROOT CMD...}; shift
exec unshare --mount --pid --fork --kill-child=SIGTERM --propagation private -- bash -c '
  set -e
  root=$1; shift
  mount --rbind /dev "$root/dev"
  mount -t proc proc "$root/proc"
  mount --bind /tmp "$root/tmp"
  exec chroot "$root" "$@"
' in-root "$ROOT" "$@"
