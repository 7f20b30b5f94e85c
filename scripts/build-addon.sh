#!/usr/bin/env bash
# Builds the agent's hashing addon (agent/image/hash-addon.c) against the pinned Node's headers and the OpenSSL
# that Node links, when the source, the Node version or this script changed. Node-API keeps the ABI stable, so
# the same file loads in the ramdisk's Node and in every test. No node-gyp: one C file needs one gcc call.
#   scripts/build-addon.sh [OUT]   default OUT: agent/image/hash-addon.node (where the agent's source finds it)
set -euo pipefail
cd "$(dirname "$0")/.."
src=agent/image/hash-addon.c
out=${1:-agent/image/hash-addon.node}
read -r version node < <(bash scripts/node.sh --where)
include="$(dirname "$(dirname "$node")")/include/node"
stamp="$version $(sha256sum "$src" "$0" | sha256sum | cut -d' ' -f1)"
if [ -e "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
command -v gcc >/dev/null ||
  { echo "build-addon.sh: gcc is missing; as root, run: apt-get install -y --no-install-recommends gcc libc6-dev" >&2; exit 1; }
# Reproducible: no build id, no paths of this checkout in the object.
gcc -std=c11 -O2 -Wall -Wextra -Werror -fPIC -shared -fvisibility=hidden -Wl,--build-id=none \
  -ffile-prefix-map="$PWD"=. -I"$include" -o "$out.tmp.$$" "$src"
mv "$out.tmp.$$" "$out"
echo "$stamp" > "$out.stamp"
