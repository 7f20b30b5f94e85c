#!/usr/bin/env bash
# Downloads the kernel and the packages in packages.txt (with their Depends closure) from Debian with
# `apt-get download`, and unpacks each into its own folder with `dpkg-deb -x` (no maintainer scripts).
# Prints `name version folder` lines for the assembler. Downloads are cached by file name.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# Downloads and unpacked packages are kept outside the tree when the machine-wide cache is writable (CI and
# every checkout build from a fresh clone), else in image-build/cache; the lock keeps two builds from unpacking
# into the same folder at once.
shared=${INA_CACHE_DIR:-/var/cache/ironic-node-agent}/ramdisk-debs
if mkdir -p "$shared" 2>/dev/null && [ -w "$shared" ]; then cache=$shared; else cache="$here/cache"; fi
mkdir -p "$cache/debs" "$cache/x"
exec 8>"$cache/.lock"
flock 8

# Alternatives apt lists next to the ones a minimal system uses (both would provide the same library).
skip='^(cdebconf|libelogind0|libdebian-installer4|libnewt0\.52|libslang2|libtextwrap1)$'

if ! apt-cache show busybox-static >/dev/null 2>&1; then "$here/../scripts/lib/apt-get.sh" update -qq >&2; fi

kernel=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
[ -n "$kernel" ] || { echo "fetch-debs: cannot resolve linux-image-amd64" >&2; exit 1; }
mapfile -t wanted < <(grep -v '^#' "$here/packages.txt" | sed '/^\s*$/d')
mapfile -t closure < <(
  { echo "$kernel"
    apt-cache depends --recurse --no-recommends --no-suggests --no-conflicts --no-breaks --no-replaces \
      --no-enhances "${wanted[@]}" | grep -v '^ ' | grep -v '^<'
  } | grep -Ev "$skip" | LC_ALL=C sort -u
)

# One apt-cache call for every candidate version (`--no-all-versions` shows the candidate only).
declare -A version
while read -r pkg v; do version[$pkg]=$v; done < <(
  apt-cache show --no-all-versions "${closure[@]}" | awk '/^Package:/{p=$2} /^Version:/{print p, $2}'
)
missing=()
for pkg in "${closure[@]}"; do
  v=${version[$pkg]:-}
  [ -n "$v" ] || { echo "fetch-debs: no candidate for $pkg" >&2; exit 1; }
  compgen -G "$cache/debs/${pkg}_${v//:/%3a}_*.deb" >/dev/null || missing+=("$pkg=$v")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "fetch-debs: downloading ${#missing[@]} packages" >&2
  # apt's one line per file fetched, with its size, so a cold download shows its progress.
  (cd "$cache/debs" && apt-get download -q -o APT::Sandbox::User=root "${missing[@]}" >&2)
fi

unpacked=$( (compgen -G "$cache/x/*/.done" || true) | wc -l)
[ "$unpacked" -ge ${#closure[@]} ] || echo "fetch-debs: unpacking up to $((${#closure[@]} - unpacked)) packages" >&2
for pkg in "${closure[@]}"; do
  v=${version[$pkg]}
  file=$(ls "$cache/debs/${pkg}_${v//:/%3a}_"*.deb | head -1)
  dir="$cache/x/$(basename "$file" .deb)"
  if [ ! -e "$dir/.done" ]; then
    rm -rf "$dir" && mkdir -p "$dir"
    dpkg-deb -x "$file" "$dir"
    touch "$dir/.done"
  fi
  echo "$pkg $v $dir"
done
