#!/bin/sh
# The e2e suite's plugin step, baked into the ramdisk it boots (test/e2e/setup.ts, scripts/fullloop/run.sh):
# proves an operator's executable step is listed, gets its args on stdin and the node's file, and that its
# output reaches the agent's log. Manual cleaning only (priority 0), so Ironic's automated cleaning never runs it.
args=$(cat)
word=$(printf '%s' "$args" | sed -n 's/.*"word": *"\([^"]*\)".*/\1/p')
[ -n "$word" ] || { echo "no word in $args" >&2; exit 2; }
[ -s "$INA_NODE_FILE" ] || { echo "no node file" >&2; exit 1; }
echo "e2e probe says $word for node $INA_NODE_UUID"
