#!/usr/bin/env bash
# The three programs the ramdisk runs, each one esbuild bundle run by plain node (no TypeScript loader):
# agent.cjs, console.cjs and netconf.cjs in OUT_DIR. image-build/build.sh and the benchmark both use it, so
# that the benchmark measures what ships.
#   scripts/bundle.sh OUT_DIR [VERSION]
# CommonJS, not ES modules: an ES import of a Node built-in reads every export of it once, and some exports
# are getters that load a whole subsystem (node:http's WebSocket loads Node's own copy of undici and
# node:http2; node:tls's rootCertificates parses every root certificate). require() reads only what is used
# (docs/runtime.md, "Memory on Node 24"). import.meta.url, which the sources use to find files beside
# them, becomes the bundle's own URL. node:http2, which the agent never speaks, is left out (scripts/no-http2.ts).
# Without comments (--minify-whitespace; names and strings stay as written): one non-ASCII character in a kept
# comment makes V8 hold the whole source as UTF-16, twice its size, for as long as the agent runs.
set -euo pipefail
out=$(realpath -m "${1:?usage: scripts/bundle.sh OUT_DIR [VERSION]}")
cd "$(dirname "$0")/.."
version=${2:-$(node -p 'require("./package.json").version')}
mkdir -p "$out"
# The banner goes before esbuild's own "use strict", which then no longer counts: it says it again first.
banner="\"use strict\"; const __inaUrl = require('node:url').pathToFileURL(__filename).href;"
for entry in agent/main.ts:agent.cjs agent/console/main.ts:console.cjs agent/netconf/main.ts:netconf.cjs; do
  npx --no-install esbuild "${entry%%:*}" --bundle --platform=node --format=cjs --target=node24 \
    --define:__AGENT_VERSION__="\"$version\"" --define:import.meta.url=__inaUrl --banner:js="$banner" \
    --alias:node:http2=./scripts/no-http2.ts \
    --legal-comments=none --minify-whitespace --log-level=warning --outfile="$out/${entry##*:}"
  if LC_ALL=C grep -q -P '[^\x00-\x7F]' "$out/${entry##*:}"; then
    echo "bundle.sh: ${entry##*:} is not ASCII (docs/runtime.md, \"Memory on Node 24\")" >&2
    exit 1
  fi
done
