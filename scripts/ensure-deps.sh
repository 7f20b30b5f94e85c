#!/usr/bin/env bash
# Installs what the agent, its tests, its demo and its bench need, when missing: npm packages and Debian tools.
# With `vm`, also what building the ramdisk and booting it under QEMU need (QEMU, OVMF and binutils: about 90 MB
# installed before their libraries, which the demo, the unit tests and the bench never use). With `bench`, also
# the bench's image server; with `fleet`, MariaDB and nginx.
set -euo pipefail
cd "$(dirname "$0")/.."
# One run at a time per checkout (`.ci/run`'s cache builders run this beside the unit suite's own call): the
# second waits, then finds everything there. The lock is this file; flock -o keeps it from what the run starts.
if [ "${INA_ENSURE_DEPS_LOCKED:-}" != "$PWD" ]; then
  INA_ENSURE_DEPS_LOCKED=$PWD exec flock -o scripts/ensure-deps.sh bash scripts/ensure-deps.sh "$@"
fi

if [ ! -x node_modules/.bin/vitest ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "ensure-deps.sh: installing npm packages (npm ci)" >&2
  # The host's npm, run by the pinned Node (fetched first) when npm is a Node script as usual: the packages'
  # engines (Node >= 22 or 24) are then checked against the Node that runs them, not the host's older one, and
  # their install scripts run on it too.
  npm_cli=$(readlink -f "$(command -v npm)")
  if head -n1 "$npm_cli" | grep -q '^#!.*node'; then
    bash scripts/node.sh "$npm_cli" ci --no-audit --no-fund
  else
    npm ci --no-audit --no-fund
  fi
fi

# command -> Debian package
declare -A tools=(
  [sgdisk]=gdisk [parted]=parted [qemu-img]=qemu-utils [mkfs.vfat]=dosfstools [mcopy]=mtools
  [genisoimage]=genisoimage [mkfs.ext4]=e2fsprogs [losetup]=mount [wipefs]=util-linux [blkid]=util-linux
  [pigz]=pigz [zstd]=zstd [xz]=xz-utils [sfdisk]=fdisk [partprobe]=parted [blkdiscard]=util-linux [curl]=curl
  [openssl]=openssl [ip]=iproute2 [hdparm]=hdparm
  # The agent's hashing addon is one C file (scripts/build-addon.sh).
  [gcc]=gcc
  [efibootmgr]=efibootmgr [stress-ng]=stress-ng [fio]=fio [tcpdump]=tcpdump [dmidecode]=dmidecode
  # The ramdisk's IPv6 client, tested against dnsmasq's DHCPv6 in a network namespace (neither starts a service).
  [dhcpcd]=dhcpcd-base [dnsmasq]=dnsmasq-base
  # The OCI registry the oci:// scenario deploys from (distribution 2.8; starts no service here) and the
  # bcrypt htpasswd file it authenticates with.
  [docker-registry]=docker-registry [htpasswd]=apache2-utils
)
# The bench's image server (scripts/bench.ts; BENCH_SERVER=node takes the tests' Node helper instead);
# nginx-light starts no service here.
[ "${1:-}" = bench ] && [ "${BENCH_SERVER:-nginx}" = nginx ] && tools+=([nginx]=nginx-light)
# The fleet (scripts/fleet/run.sh): MariaDB as the conductors' shared database and nginx as each conductor's
# HTTP server; both started by the harness itself (the packages' services do not start here).
[ "${1:-}" = fleet ] && tools+=([nginx]=nginx-light [mariadbd]=mariadb-server [mariadb-install-db]=mariadb-server)
# file -> Debian package, for packages that bring no command
# The LLDP tests' switch side builds its frames with scapy's LLDP layers (test/helpers/lldp-send.py).
declare -A files=([/usr/include/stdlib.h]=libc6-dev [/usr/lib/python3/dist-packages/scapy/contrib/lldp.py]=python3-scapy)
if [ "${1:-}" = vm ]; then
  tools+=([qemu-system-x86_64]=qemu-system-x86 [readelf]=binutils [strip]=binutils)
  # The e2e's SSH client for the rescue login (binaries only: the package starts no server).
  tools+=([dbclient]=dropbear-bin)
  files+=([/usr/share/OVMF/OVMF_CODE_4M.fd]=ovmf)
fi
missing=()
for cmd in "${!tools[@]}"; do
  # A user's PATH lacks the sbin directories where most of these tools live.
  PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin" command -v "$cmd" >/dev/null 2>&1 || missing+=("${tools[$cmd]}")
done
for f in "${!files[@]}"; do
  [ -e "$f" ] || missing+=("${files[$f]}")
done
if [ ${#missing[@]} -gt 0 ]; then
  mapfile -t pkgs < <(printf '%s\n' "${missing[@]}" | sort -u)
  if [ "$(id -u)" -ne 0 ]; then
    echo "ensure-deps.sh: missing Debian packages; as root, run: apt-get install -y --no-install-recommends ${pkgs[*]}" >&2
    exit 1
  fi
  echo "ensure-deps.sh: installing Debian packages and what they depend on: ${pkgs[*]}" >&2
  # apt's own lines, less the per-file unpacking chatter: what it fetches (with sizes) and sets up, as it goes.
  compact() { sed -u -E '/^(Reading|Building|Selecting|\(Reading|Preparing|Unpacking|Processing|The following|  )/d; s/^/  apt: /'; }
  scripts/lib/apt-get.sh update -q | compact
  # Waits for another apt (a second suite, an unattended upgrade) instead of failing on its lock.
  DEBIAN_FRONTEND=noninteractive scripts/lib/apt-get.sh install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${pkgs[@]}" | compact
fi
bash scripts/build-addon.sh
