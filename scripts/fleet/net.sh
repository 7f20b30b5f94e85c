# Sourced by run.sh: the fleet's network, namespaces only. A hub namespace holds a bridge; every other
# namespace (ctl: the API, MariaDB, the image source and the driver; c1, c2: one conductor each; aNN: one
# agent each) has one veth into it and one address from 10.47.0.0/16, which exists nowhere else. No
# namespace has a default route, so nothing in them can reach an address outside the fleet.
# Needs FLEET_NS (the namespace name prefix, unique per run).

fleet_ns() { echo "${FLEET_NS}-$1"; }

# fleet_ns_add NAME ADDRESS [MAC [IFNAME]]: namespace NAME with IFNAME (default eth0) = ADDRESS/16, bridged
# in the hub.
fleet_ns_add() {
  local name=$1 addr=$2 mac=${3:-} dev=${4:-eth0} ns hubside
  ns=$(fleet_ns "$name")
  hubside="v${FLEET_NS: -4}$name"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip link add "$hubside" type veth peer name "$dev" netns "$ns"
  ip link set "$hubside" netns "$(fleet_ns hub)"
  ip -n "$(fleet_ns hub)" link set "$hubside" master br0 up
  [ -n "$mac" ] && ip -n "$ns" link set "$dev" address "$mac"
  ip -n "$ns" addr add "$addr/16" dev "$dev"
  ip -n "$ns" link set "$dev" up
}

fleet_net_up() {
  ip netns add "$(fleet_ns hub)"
  ip -n "$(fleet_ns hub)" link set lo up
  ip -n "$(fleet_ns hub)" link add br0 type bridge
  ip -n "$(fleet_ns hub)" link set br0 up
}

# Ends every process in the fleet's namespaces (TERM, then KILL), then deletes the namespaces.
fleet_net_down() {
  # best effort to the end: a process or namespace already gone is no error
  local - ns pids
  set +e
  mapfile -t all < <(ip netns list | awk -v p="$FLEET_NS-" 'index($1, p) == 1 {print $1}')
  for ns in "${all[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && { kill $pids 2>/dev/null || true; }
  done
  for _ in $(seq 50); do
    pids=""
    for ns in "${all[@]}"; do pids+=$(ip netns pids "$ns" 2>/dev/null || true); done
    [ -z "$pids" ] && break
    sleep 0.2
  done
  for ns in "${all[@]}"; do
    pids=$(ip netns pids "$ns" 2>/dev/null || true)
    [ -n "$pids" ] && { kill -9 $pids 2>/dev/null || true; }
  done
  sleep 0.2
  for ns in "${all[@]}"; do ip netns del "$ns" 2>/dev/null || true; done
}

# fleet_agent_ns I: agent I's namespace a<I>, address 10.47.1.<I>, its own MAC 52:54:00:47:01:<I>. The agent
# lists only physical NICs, bonds and VLANs (`<name>.<vid>`, by name, as IPA does) and a veth is none of them;
# this kernel has neither VLAN nor bonding support, so the veth itself is named as a VLAN interface (eth0.7),
# which the agent then reports and looks itself up by. Its traffic is untagged.
fleet_agent_ns() {
  local i=$1
  fleet_ns_add "$(printf 'a%02d' "$i")" "10.47.1.$i" "$(printf '52:54:00:47:01:%02x' "$i")" eth0.7
}
