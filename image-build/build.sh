#!/usr/bin/env bash
# Builds the deploy ramdisk from Debian packages and the npm registry only:
#   image-build/out/vmlinuz         the Debian kernel
#   image-build/out/initramfs.img   zstd cpio: busybox, disk tools, Node, the agent and the console
#   image-build/out/manifest.json   every package with its version and the bytes it adds
#   image-build/out/vmlinux         the same kernel uncompressed, for QEMU's faster PVH boot (tests)
# Reproducible: the same inputs (package versions, sources, SOURCE_DATE_EPOCH) give the same hash.
# Downloads are cached in image-build/cache/.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
out="$here/out"
work="$here/cache/work"
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-1767225600}
export TZ=UTC LC_ALL=C
start=$(date +%s)

for tool in apt-get dpkg-deb readelf strip zstd xz npm gcc; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is required" >&2; exit 1; }
done

mkdir -p "$out" "$work"
# One build at a time per checkout: two suites started side by side (.ci/run) share $work and $out.
exec 9>"$here/cache/.build.lock"
if ! flock -n 9; then
  echo "build.sh: another build of this checkout is running; waiting for it" >&2
  flock 9
fi
echo "build.sh: fetching Debian packages" >&2
bash "$here/fetch-debs.sh" > "$work/debs.txt"
echo "build.sh: fetching Node" >&2
read -r node_version node_dist < <(bash "$repo/scripts/node.sh" --where)
# The bundles are built, smoke-tested and assembled by the Node they will ship with.
PATH="$(dirname "$node_dist"):$PATH"
# The official binary carries its symbol table (12 MB); the dynamic symbols addons link against stay.
node_bin="$work/node"
strip --strip-unneeded -o "$node_bin" "$node_dist"

echo "build.sh: bundling the agent and the console" >&2
agent_version=$(node -p 'require(process.argv[1]).version' "$repo/package.json")
rm -rf "$work/bundles" && mkdir -p "$work/bundles"
bash "$repo/scripts/bundle.sh" "$work/bundles" "$agent_version"
# The image checksum's addon goes beside agent.cjs, where the agent looks for it (agent/image/image-hash.ts).
bash "$repo/scripts/build-addon.sh" "$work/bundles/hash-addon.node"
rm -f "$work/bundles/hash-addon.node.stamp"
"$node_bin" -e 'require(process.argv[1]).create("sha256")' "$work/bundles/hash-addon.node" ||
  { echo "build.sh: the hashing addon does not load in the ramdisk's Node" >&2; exit 1; }
# The LLDP capture helper (libc only) goes beside agent.cjs too (agent/inspect/lldp-capture.ts).
bash "$repo/scripts/build-lldp-listen.sh" "$work/bundles/ina-lldp-listen"
rm -f "$work/bundles/ina-lldp-listen.stamp"
"$work/bundles/ina-lldp-listen" 0 lo | grep -Eq '^lo (none$|error )' ||
  { echo "build.sh: the LLDP helper does not run" >&2; exit 1; }
# Bundles that cannot start must fail the build, not the boot: run both once with the ramdisk's Node.
printf 'standalone=1\n' > "$work/cmdline"
"$node_bin" "$work/bundles/agent.cjs" --kernel-cmdline="$work/cmdline" --ipa-listen-host=127.0.0.1 \
  --ipa-listen-port=0 > "$work/smoke.log" 2>&1 &
smoke=$!
for _ in $(seq 100); do grep -q 'agent API listening' "$work/smoke.log" && break; sleep 0.1; done
kill "$smoke" 2>/dev/null || true
wait "$smoke" 2>/dev/null || true
grep -q 'agent API listening' "$work/smoke.log" || { cat "$work/smoke.log" >&2; echo "build.sh: the agent bundle does not start" >&2; exit 1; }
"$node_bin" "$work/bundles/console.cjs" --once --kernel-cmdline="$work/cmdline" --status-file="$work/none.json" \
  --log-file="$work/smoke.log" | grep -q 'ironic-node-agent' || { echo "build.sh: the console bundle does not start" >&2; exit 1; }
netconf=$("$node_bin" "$work/bundles/netconf.cjs" --network-data="$work/none.json" 2>&1 || true)
grep -q 'cannot read' <<< "$netconf" || { echo "build.sh: the netconf bundle does not start: $netconf" >&2; exit 1; }

# An operator's hardware manager plugins (docs/operating.md): INA_HARDWARE_MANAGERS names a folder, copied into
# the ramdisk's /etc/ironic-node-agent/hardware-managers.
plugins=()
if [ -n "${INA_HARDWARE_MANAGERS:-}" ]; then
  [ -d "$INA_HARDWARE_MANAGERS" ] || { echo "build.sh: INA_HARDWARE_MANAGERS=$INA_HARDWARE_MANAGERS is no folder" >&2; exit 1; }
  plugins=(--hardware-managers "$(cd "$INA_HARDWARE_MANAGERS" && pwd)")
fi

# Everything the initramfs is made of; when none of it changed, the last output stands.
fingerprint=$( { cat "$work/debs.txt"; echo "node $node_version $SOURCE_DATE_EPOCH";
  [ ${#plugins[@]} -eq 0 ] || (cd "${plugins[1]}" && find . -print0 | LC_ALL=C sort -z | xargs -0 stat -c '%n %a' &&
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum);
  cd "$here" && find rootfs lib assemble.ts files.txt modules.txt -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum;
  cd "$work/bundles" && sha256sum ./*; } | sha256sum | cut -d' ' -f1)
# Builds are also kept outside the tree by fingerprint (the last three), so a fresh clone (CI) with the same
# inputs takes the build instead of spending minutes in zstd -19.
store_root=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/ramdisk
store=""
if mkdir -p "$store_root" 2>/dev/null && [ -w "$store_root" ]; then store="$store_root/$fingerprint"; fi
built=(vmlinuz vmlinux initramfs.img manifest.json summary.json)
if [ -s "$out/initramfs.img" ] && [ -s "$out/summary.json" ] && [ "$(cat "$out/.fingerprint" 2>/dev/null)" = "$fingerprint" ]; then
  echo "build.sh: inputs unchanged, keeping $out/initramfs.img" >&2
elif [ -n "$store" ] && [ -e "$store/.complete" ]; then
  echo "build.sh: inputs unchanged since a build kept in $store, taking it" >&2
  for f in "${built[@]}"; do cp "$store/$f" "$out/$f"; done
  echo "$fingerprint" > "$out/.fingerprint"
else
  echo "build.sh: assembling the initramfs" >&2
  rm -f "$out/initramfs.img" "$out/manifest.json" "$out/summary.json" "$out/.fingerprint"
  (cd "$repo" && npx --no-install tsx "$here/assemble.ts" --debs "$work/debs.txt" --node-version "$node_version" \
    --node "$node_bin" --bundles "$work/bundles" --agent-version "$agent_version" --out "$out" \
    --epoch "$SOURCE_DATE_EPOCH" "${plugins[@]}") > "$out/summary.json"
  echo "build.sh: extracting the uncompressed kernel for QEMU" >&2
  # QEMU-only shortcut: the uncompressed kernel boots by its PVH entry, skipping real mode and the
  # decompressor (seconds under software emulation). Bare metal and PXE use vmlinuz.
  xz_at=$(node -e 'const b = require("fs").readFileSync(process.argv[1]);
    console.log(b.indexOf(Buffer.from([0xfd, 0x37, 0x7a, 0x58, 0x5a, 0])))' "$out/vmlinuz")
  [ "$xz_at" -gt 0 ] || { echo "build.sh: vmlinuz holds no xz stream" >&2; exit 1; }
  tail -c +$((xz_at + 1)) "$out/vmlinuz" > "$work/vmlinux.xz"
  xz -dc --single-stream "$work/vmlinux.xz" > "$out/vmlinux"
  rm -f "$work/vmlinux.xz"
  echo "$fingerprint" > "$out/.fingerprint"
  if [ -n "$store" ]; then
    rm -rf "$store.tmp.$$" && mkdir -p "$store.tmp.$$"
    for f in "${built[@]}"; do cp "$out/$f" "$store.tmp.$$/$f"; done
    touch "$store.tmp.$$/.complete"
    rm -rf "$store" && mv "$store.tmp.$$" "$store"
    # shellcheck disable=SC2012 # names are hex fingerprints
    (cd "$store_root" && ls -1t | grep -v '\.tmp\.' | tail -n +4 | xargs -r rm -rf)
  fi
fi
summary=$(cat "$out/summary.json")

node -e '
  const s = JSON.parse(process.argv[1]);
  const mb = (n) => (n / 1048576).toFixed(1) + " MiB";
  console.log(`initramfs.img: ${mb(s.bytes)} zstd (${mb(s.uncompressed)} uncompressed), limit 60 MiB`);
  console.log(`sha256: ${s.sha256}`);
  if (s.bytes > 60 * 1048576) { console.error("build.sh: initramfs is over 60 MiB"); process.exit(1); }
' "$summary"
echo "build.sh: done in $(( $(date +%s) - start )) s -> $out" >&2
