#!/usr/bin/env bash
# `npm run bench` with the agent of an older commit beside this tree's, on the same images in the same
# repetitions (BENCH_BEFORE in scripts/bench.ts): by default the last commit before the runtime switch
# (07839fd: Node 20, undici 7), on the host's Node 20. The older checkout is a git worktree under /tmp
# with its own npm install, made once and kept. Any BENCH_* setting passes through.
#   scripts/bench-before-after.sh [COMMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
commit=${1:-07839fd}
tree=/tmp/ina-before-$commit
if [ ! -e "$tree/node_modules/.bin/esbuild" ]; then
  [ -e "$tree" ] || git worktree add --detach "$tree" "$commit"
  (cd "$tree" && npm ci --no-audit --no-fund)
fi
BENCH_BEFORE=$tree BENCH_BEFORE_NODE=${BENCH_BEFORE_NODE:-/usr/bin/node} exec npm run -s bench
