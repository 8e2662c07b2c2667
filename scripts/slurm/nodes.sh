# Compute nodes in network namespaces, sourced by cluster.sh: each node a slurmd in its own network
# and UTS namespace (hostname = node name) with its own address, so one machine runs a multi-node
# cluster whose job steps really cross a network.
#
#   root namespace                      CLUSTER-sw (namespace)         CLUSTER-n1, CLUSTER-n2, ...
#   txslurmSLOT  PREFIX.SLOT.1/24  <->  uplink -[br0]- n1 ... nN  <->  eth0  PREFIX.SLOT.11, .12, ...
#
# The bridge lives in a namespace of its own ("switch") rather than in the root namespace: there,
# br_netfilter (loaded with Docker) hands bridged frames to the root namespace's iptables, whose
# FORWARD policy Docker sets to DROP, so node-to-node traffic would need a rule in the machine's
# firewall. In the switch namespace no rule applies and the machine's firewall stays untouched; the
# root namespace sees one veth (the controller's address) and nothing else.
#
# SLOT is 0 for the shared cluster and the first free one of 1..250 for a private cluster (taken
# under a lock by creating its uplink), so private clusters and the shared one coexist. Names:
# netns CLUSTER-sw and CLUSTER-nI, nodes CLUSTER-nI, uplink txslurmSLOT (a link name: <= 15 chars).
# Inside a node, /etc/netns/CLUSTER-nI/hosts is bound over /etc/hosts, as `ip netns exec` does (which
# sees the same): every node's name and address and this host's name at the controller's address;
# the machine's /etc/hosts is not changed. What was created is written to $STATE/run/nodes.env, which `down` reads.
#
# Inputs (set by cluster.sh): STATE, CLUSTER, HOST, PRIVATE; SLURM_NS_NODES (2), SLURM_NET_PREFIX
# (10.213). Outputs of ns_up: NS_NODES (names), NS_ADDRS, CTLD_ADDR; NS_REASON when it fails.

NS_FILE="$STATE/run/nodes.env"
NS_LOCK=/run/lock/torchx-airflow-slurm-net.lock
NET_PREFIX="${SLURM_NET_PREFIX:-10.213}"
NS_COUNT="${SLURM_NS_NODES:-2}"
NS_NODES=()
NS_ADDRS=()
CTLD_ADDR=""
NS_REASON=""

ns_names() {  # the node names of this cluster
  local i
  NS_NODES=()
  for i in $(seq "$NS_COUNT"); do NS_NODES+=("$CLUSTER-n$i"); done
}

ns_free_slot() {  # prints the shared slot (0) or the first private one without an uplink
  local slot
  if [ "$PRIVATE" = 0 ]; then echo 0; return; fi
  for slot in $(seq 1 250); do
    ip link show "txslurm$slot" >/dev/null 2>&1 || { echo "$slot"; return; }
  done
  return 1
}

ns_create() {  # slot: the switch, the uplink, one namespace per node with its hosts file
  local slot="$1" i name addr hosts
  CTLD_ADDR="$NET_PREFIX.$slot.1"
  ip netns add "$CLUSTER-sw" || return 1
  ip -n "$CLUSTER-sw" link add br0 type bridge || return 1
  ip link add "txslurm$slot" type veth peer name uplink netns "$CLUSTER-sw" || return 1
  ip addr add "$CTLD_ADDR/24" dev "txslurm$slot" || return 1
  ip link set "txslurm$slot" up || return 1
  ip -n "$CLUSTER-sw" link set uplink master br0 up || return 1
  ip -n "$CLUSTER-sw" link set br0 up || return 1
  hosts="127.0.0.1 localhost"$'\n'"$CTLD_ADDR $HOST"$'\n'
  NS_ADDRS=()
  for i in $(seq "$NS_COUNT"); do
    NS_ADDRS+=("$NET_PREFIX.$slot.$((10 + i))")
    hosts+="${NS_ADDRS[-1]} $CLUSTER-n$i"$'\n'
  done
  for i in $(seq "$NS_COUNT"); do
    name="$CLUSTER-n$i" addr="${NS_ADDRS[$((i - 1))]}"
    ip netns add "$name" || return 1
    ip -n "$CLUSTER-sw" link add "n$i" type veth peer name eth0 netns "$name" || return 1
    ip -n "$CLUSTER-sw" link set "n$i" master br0 up || return 1
    ip -n "$name" addr add "$addr/24" dev eth0 || return 1
    ip -n "$name" link set eth0 up || return 1
    ip -n "$name" link set lo up || return 1
    mkdir -p "/etc/netns/$name" && printf '%s' "$hosts" > "/etc/netns/$name/hosts" || return 1
  done
  {
    echo "NS_SLOT=$slot"
    echo "CTLD_ADDR=$CTLD_ADDR"
    echo "NS_NODES=(${NS_NODES[*]})"
    echo "NS_ADDRS=(${NS_ADDRS[*]})"
  } > "$NS_FILE"
}

ns_exists() {  # whether every namespace of this cluster is there (a second `up` keeps them)
  local name
  [ -f "$NS_FILE" ] || return 1
  for name in "$CLUSTER-sw" "${NS_NODES[@]}"; do
    [ -e "/run/netns/$name" ] || return 1
  done
}

ns_up() {  # the namespaces, or return 1 with NS_REASON (the caller falls back to one node)
  local slot
  ns_names
  if [ "${SLURM_MULTINODE:-1}" = 0 ]; then
    NS_REASON="SLURM_MULTINODE=0 or --single-node asked for one node"
    ns_down  # namespaces of an earlier `up`
    return 1
  fi
  if ns_exists; then
    # shellcheck disable=SC1090
    . "$NS_FILE"
    return 0
  fi
  if ! command -v ip >/dev/null || ! command -v unshare >/dev/null || ! command -v nsenter >/dev/null; then
    NS_REASON="ip (iproute2), or unshare or nsenter (util-linux), is missing"
    return 1
  fi
  ns_down
  mkdir -p "$STATE/run" /run/lock
  exec 9> "$NS_LOCK"
  flock 9
  if ! slot="$(ns_free_slot)"; then
    NS_REASON="no free network slot (txslurm1..250 all exist)"
  elif ! ns_create "$slot" > "$STATE/log/netns.log" 2>&1; then
    NS_REASON="creating the network namespaces failed: $(tail -n 1 "$STATE/log/netns.log")"
  fi
  flock -u 9
  exec 9>&-
  if [ -n "$NS_REASON" ]; then
    ns_down
    return 1
  fi
}

ns_slurmd_alive() {  # node: whether its pid file names a live slurmd
  local pid
  pid="$(cat "$STATE/run/slurmd-$1.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

ns_start_slurmds() {  # a slurmd per node, in its namespaces, named and with the hostname of the node
  local name
  [ -f "$NS_FILE" ] || return 0
  # shellcheck disable=SC1090
  . "$NS_FILE"
  for name in "${NS_NODES[@]}"; do
    ns_slurmd_alive "$name" && continue
    mkdir -p "$STATE/d/$name"
    # what `ip netns exec` does (the node's hosts file over /etc/hosts in a mount namespace of its
    # own), without remounting /sys, which would hide the cgroup mounts slurmd needs; SLURM_CONF (a
    # private cluster's) passes through the environment
    nsenter --net="/run/netns/$name" unshare --mount --propagation slave --uts \
      sh -c 'mount --bind "/etc/netns/$1/hosts" /etc/hosts && hostname "$1" && exec slurmd -N "$1"' sh "$name"
    log "slurmd $name started (netns $name)"
  done
}

ns_kill() {  # netns: every process in it (its slurmd, slurmstepds and job tasks), SIGTERM, then
  # SIGKILL after 2 s (slurmstepd outlives SIGTERM); a namespace lives on while a process holds it
  local pids
  pids="$(ip netns pids "$1" 2>/dev/null)" || return 0
  [ -n "$pids" ] || return 0
  # shellcheck disable=SC2086
  kill $pids 2>/dev/null || true
  for _ in $(seq 4); do
    [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
  # shellcheck disable=SC2046
  kill -9 $(ip netns pids "$1" 2>/dev/null) 2>/dev/null || true
  for _ in $(seq 10); do
    [ -z "$(ip netns pids "$1" 2>/dev/null)" ] && return 0
    sleep 0.5
  done
}

ns_down() {  # everything ns_up made: processes in the namespaces, the namespaces (and with them
  # the veths and the bridge), the uplink, /etc/netns/NODE, nodes.env
  local name NS_SLOT=""
  ns_names
  # shellcheck disable=SC1090
  [ -f "$NS_FILE" ] && . "$NS_FILE"
  for name in "${NS_NODES[@]}" "$CLUSTER-sw"; do
    [ -e "/run/netns/$name" ] || continue
    ns_kill "$name"
    ip netns del "$name" 2>/dev/null || true
  done
  for name in "${NS_NODES[@]}"; do rm -rf "/etc/netns/$name"; done
  rmdir /etc/netns 2>/dev/null || true  # when this script made it
  [ -n "$NS_SLOT" ] && ip link del "txslurm$NS_SLOT" 2>/dev/null || true
  rm -f "$NS_FILE"
}
