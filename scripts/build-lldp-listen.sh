#!/usr/bin/env bash
# Builds the LLDP capture helper (agent/inspect/lldp-listen.c, libc only) when its source or this script changed.
# The agent looks for it beside its own source or bundle (agent/inspect/lldp-capture.ts); the ramdisk build puts it
# beside agent.cjs (image-build/build.sh).
#   scripts/build-lldp-listen.sh [OUT]   default OUT: agent/inspect/ina-lldp-listen
set -euo pipefail
cd "$(dirname "$0")/.."
src=agent/inspect/lldp-listen.c
out=${1:-agent/inspect/ina-lldp-listen}
stamp="$(sha256sum "$src" "$0" | sha256sum | cut -d' ' -f1)"
if [ -e "$out" ] && [ "$(cat "$out.stamp" 2>/dev/null)" = "$stamp" ]; then exit 0; fi
command -v gcc >/dev/null || { echo "build-lldp-listen.sh: gcc is required (Debian package gcc)" >&2; exit 1; }
# Reproducible: no build id, no paths of this checkout in the binary.
gcc -std=c11 -O2 -Wall -Wextra -Werror -s -Wl,--build-id=none -ffile-prefix-map="$PWD"=. -o "$out.tmp" "$src"
mv "$out.tmp" "$out"
echo "$stamp" > "$out.stamp"
