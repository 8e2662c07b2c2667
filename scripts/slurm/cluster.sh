#!/usr/bin/env bash
# A Slurm cluster with accounting, from Debian packages, for tests and local use: this host as node
# one, alone in the default partition "debug", and two compute nodes in network namespaces
# (scripts/slurm/nodes.sh) in the partitions "multi" (preemptible) and "urgent" (preempts "multi").
#
#   scripts/slurm/cluster.sh install   apt-get the packages (root; once per machine)
#   scripts/slurm/cluster.sh up        start munge, MariaDB, slurmdbd, slurmctld, the slurmds (root)
#   scripts/slurm/cluster.sh down      stop them again, remove the namespaces
#   scripts/slurm/cluster.sh status    exit 0 when sinfo and sacct answer
#
# Where the namespaces cannot be made (ip netns add fails, iproute2 missing), `up` starts the one-node
# cluster and says so: no "multi" or "urgent" partition, and the tests that need two nodes skip with
# the reason written to $SLURM_STATE/multinode. `up --single-node` (or SLURM_MULTINODE=0) asks for
# that fallback. SLURM_NS_NODES (2) namespace nodes; SLURM_NET_PREFIX (10.213) their /16.
#
# A private cluster beside it (tests that stop daemons or need another configuration use one, so the
# shared cluster never changes): its own configs, state, pid files and ports, the same munge and
# MariaDB (its own database). Every Slurm command then needs SLURM_CONF=$SLURM_STATE/etc/slurm.conf.
#
#   SLURM_STATE=/tmp/c SLURMCTLD_PORT=7817 SLURMD_PORT=7818 SLURMDBD_PORT=7819 \
#     scripts/slurm/cluster.sh up --private [--no-accounting | --no-job-comment] [--cluster NAME] \
#       [--multinode]
#   SLURM_STATE=/tmp/c scripts/slurm/cluster.sh stop --private slurmctld slurmdbd   by pid file
#   SLURM_STATE=/tmp/c scripts/slurm/cluster.sh start --private    what was stopped, again
#   SLURM_STATE=/tmp/c scripts/slurm/cluster.sh down --private
#
# --no-accounting: no slurmdbd at all (AccountingStorageType unset, no sacct); --no-job-comment:
# accounting as Slurm's default keeps it, without AccountingStoreFlags=job_comment; --multinode: the
# namespace nodes and their partitions too (a private cluster has only this host's node otherwise),
# in network namespaces, a subnet and an uplink of its own; --gpus TYPE:N:
# the node has N GPUs of TYPE, as a GRES whose device files are stand-ins for /dev/null under
# $SLURM_STATE (Slurm's gpu plugin wants a file per GPU; with TaskPlugin=task/none nothing is bound):
# jobs get them as counted resources, and accounting records gres/gpu and gres/gpu:TYPE in AllocTRES.
#
# Everything this script writes lives under $SLURM_STATE (default /var/tmp/torchx-airflow-slurm):
# configs, spool directories, logs, the MariaDB data directory and pid files; the namespaces add
# /etc/netns/NODE/hosts per node and one link in the root namespace (nodes.sh). This host's node has
# all its CPUs (at least 8) and ~80% of its memory; each namespace node 2 CPUs and 4 GB.
set -euo pipefail

STATE="${SLURM_STATE:-/var/tmp/torchx-airflow-slurm}"
ETC=/etc/slurm
HOST="$(hostname -s)"
PRIVATE=0
ACCOUNTING=full   # full | none | no_job_comment
MULTINODE=""      # 1: the namespace nodes (the shared cluster's default), 0: this host's node only
GPUS=""           # TYPE:COUNT of GPUs as a GRES (--gpus)
COMMAND="${1:-}"
[ $# -gt 0 ] && shift
while [ $# -gt 0 ]; do
  case "$1" in
    --private) PRIVATE=1 ;;
    --no-accounting) ACCOUNTING=none ;;
    --no-job-comment) ACCOUNTING=no_job_comment ;;
    --cluster) shift; CLUSTER_NAME="$1" ;;
    --multinode) MULTINODE=1 ;;
    --single-node) MULTINODE=1; export SLURM_MULTINODE=0 ;;
    --gpus) shift; GPUS="$1" ;;
    *) break ;;
  esac
  shift
done
if [ -n "$GPUS" ] && [ "$PRIVATE" != 1 ]; then
  echo "[slurm] --gpus is for a private cluster (--private): the shared one keeps its configuration" >&2; exit 2
fi
if [ "$PRIVATE" = 1 ]; then
  [ -n "${SLURM_STATE:-}" ] || { echo "[slurm] --private needs SLURM_STATE (its own directory)" >&2; exit 2; }
  ETC="$STATE/etc"
  export SLURM_CONF="$ETC/slurm.conf"
fi
PACKAGES=(slurmctld slurmd slurmdbd slurm-client munge mariadb-server)
CLUSTER="${CLUSTER_NAME:-torchx}"
DB_NAME=slurm_acct_db
[ "$PRIVATE" = 1 ] && DB_NAME="slurm_acct_$CLUSTER"
DB_USER=slurm
DB_PASS=slurmdbd-local
[ -n "$MULTINODE" ] || MULTINODE=$((1 - PRIVATE))
NS_ACTIVE=0
# shellcheck source=scripts/slurm/nodes.sh
. "$(dirname "$0")/nodes.sh"

log() { echo "[slurm] $*"; }
need_root() {
  if [ "$(id -u)" != 0 ]; then
    echo "[slurm] $1 needs root (packages and daemons); run it as root or with sudo" >&2
    exit 2
  fi
}

install() {
  need_root install
  if command -v slurmctld >/dev/null && command -v slurmdbd >/dev/null && command -v munged >/dev/null \
     && command -v mariadbd >/dev/null && command -v sacct >/dev/null; then
    log "packages already installed"
    return
  fi
  log "installing ${PACKAGES[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${PACKAGES[@]}" > "$STATE.apt.log" 2>&1 \
    || { cat "$STATE.apt.log" >&2; exit 1; }
}

accounting_config() {
  [ "$ACCOUNTING" = none ] && return
  echo "AccountingStorageType=accounting_storage/slurmdbd"
  echo "AccountingStorageHost=localhost"
  echo "AccountingStoragePort=${SLURMDBD_PORT:-6819}"
  [ "$ACCOUNTING" = no_job_comment ] && return
  echo "# job comments in accounting: a retry finds a job by the mark its try put there (torchx_airflow.schedulers.slurm)"
  echo "AccountingStoreFlags=job_comment"
}

gres_config() {  # slurm.conf lines of the --gpus GRES
  [ -n "$GPUS" ] || return 0
  echo "GresTypes=gpu"
  [ "$ACCOUNTING" = none ] || echo "AccountingStorageTRES=gres/gpu,gres/gpu:${GPUS%%:*}"
}

write_configs() {
  local cpus mem_mb
  # The node offers at least SLURM_NODE_CPUS CPUs (8), more than a small machine has
  # (SlurmdParameters=config_overrides, TaskPlugin=task/none: nothing is pinned): test jobs mostly
  # sleep, and one that asks for a CPU must not wait behind another test's jobs on a 2-core machine.
  cpus="$(nproc)"
  [ "$cpus" -ge "${SLURM_NODE_CPUS:-8}" ] || cpus="${SLURM_NODE_CPUS:-8}"
  mem_mb="$(awk '/MemTotal/ {printf "%d", $2 / 1024 * 0.8}' /proc/meminfo)"
  mkdir -p "$STATE"/{ctld,d,log,run,mysql} "$ETC"
  cat > "$ETC/slurmdbd.conf" <<CONF
AuthType=auth/munge
DbdHost=localhost
DbdPort=${SLURMDBD_PORT:-6819}
SlurmUser=root
LogFile=$STATE/log/slurmdbd.log
PidFile=$STATE/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=${MARIADB_PORT:-3306}
StorageUser=$DB_USER
StoragePass=$DB_PASS
StorageLoc=$DB_NAME
CONF
  chmod 600 "$ETC/slurmdbd.conf"
  local ctld_host="$HOST"
  # the namespace nodes reach the controller at the uplink's address (this host's 127.0.0.1 is not theirs)
  [ "$NS_ACTIVE" = 1 ] && ctld_host="$HOST($CTLD_ADDR)"
  cat > "$ETC/slurm.conf" <<CONF
ClusterName=$CLUSTER
SlurmctldHost=$ctld_host
AuthType=auth/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SlurmdParameters=config_overrides
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
# a job that asks no memory (TorchX sends none for a role without memMB) takes 1 GB per CPU, not the
# whole node: jobs run side by side instead of one at a time (scheduling only, nothing is enforced)
DefMemPerCPU=1024
SlurmUser=root
SlurmctldPort=${SLURMCTLD_PORT:-6817}
SlurmdPort=${SLURMD_PORT:-6818}
StateSaveLocation=$STATE/ctld
# one slurmd per node on this machine: %n is the node's name
SlurmdSpoolDir=$STATE/d/%n
SlurmctldPidFile=$STATE/run/slurmctld.pid
SlurmdPidFile=$STATE/run/slurmd-%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd-%n.log
$(accounting_config)
$(gres_config)
JobAcctGatherType=jobacct_gather/linux
JobCompType=jobcomp/none
# a node set DOWN by hand (scontrol update nodename=N state=down reason=R) stays down until
# state=resume (cluster.sh up resumes every node); one that stopped answering returns when its slurmd does
ReturnToService=1
MinJobAge=${SLURM_MIN_JOB_AGE:-300}
KillWait=5
InactiveLimit=0
SchedulerType=sched/backfill
# only the backfill scheduler starts heterogeneous jobs (TorchX submits one component per replica):
# every 2 s rather than every 30 s
SchedulerParameters=bf_interval=2
MpiDefault=none
# a job whose node fails ends NODE_FAIL unless it asked for --requeue (TorchX's Slurm scheduler puts
# --requeue in every job: such a job is requeued under its id, its NODE_FAIL kept in sacct -D); a
# job in a partition of a higher PriorityTier cancels the jobs whose nodes it needs ("urgent" over
# "multi"), which end PREEMPTED, --requeue or not
JobRequeue=0
PreemptType=preempt/partition_prio
PreemptMode=CANCEL
NodeName=$HOST CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN${GPUS:+ Gres=gpu:$GPUS}
PartitionName=debug Nodes=$HOST Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
$(ns_config)
CONF
  [ -n "$GPUS" ] || return 0
  local i last=$(( ${GPUS##*:} - 1 ))
  mkdir -p "$STATE/dev"
  for i in $(seq 0 "$last"); do
    [ -e "$STATE/dev/gpu$i" ] || mknod "$STATE/dev/gpu$i" c 1 3  # /dev/null's numbers
  done
  echo "NodeName=$HOST Name=gpu Type=${GPUS%%:*} File=$STATE/dev/gpu[0-$last]" > "$ETC/gres.conf"
}

ns_config() {  # the namespace nodes and their partitions, when they are up
  [ "$NS_ACTIVE" = 1 ] || return 0
  local i nodes
  for i in "${!NS_NODES[@]}"; do
    echo "NodeName=${NS_NODES[$i]} NodeAddr=${NS_ADDRS[$i]} NodeHostname=${NS_NODES[$i]} CPUs=2 RealMemory=4096 State=UNKNOWN"
  done
  nodes="$(IFS=,; echo "${NS_NODES[*]}")"
  echo "PartitionName=multi Nodes=$nodes PriorityTier=1 PreemptMode=CANCEL MaxTime=INFINITE State=UP"
  echo "PartitionName=urgent Nodes=$nodes PriorityTier=2 PreemptMode=OFF MaxTime=INFINITE State=UP"
}

nodes_up() {  # the namespaces when asked for, else (or when they fail) one node, said loudly
  NS_ACTIVE=0
  if [ "$MULTINODE" = 0 ]; then
    rm -f "$STATE/multinode"
    return
  fi
  if ns_up; then
    NS_ACTIVE=1
    echo "present: ${NS_NODES[*]}" > "$STATE/multinode"
    return
  fi
  echo "absent: $NS_REASON" > "$STATE/multinode"
  echo "[slurm] WARNING: no multi-node partitions (\"multi\", \"urgent\"): $NS_REASON." >&2
  echo "[slurm] WARNING: this cluster has one node, $HOST, in partition \"debug\"; tests that need two nodes skip." >&2
}

start_munge() {
  if pgrep -x munged >/dev/null; then return; fi
  mkdir -p /run/munge /var/log/munge /var/lib/munge
  [ -s /etc/munge/munge.key ] || { mkdir -p /etc/munge; dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key 2>/dev/null; }
  chown -R munge:munge /etc/munge /run/munge /var/log/munge /var/lib/munge
  chmod 400 /etc/munge/munge.key
  chmod 0755 /run/munge
  su -s /bin/sh munge -c "munged"
  log "munged started"
}

start_mariadb() {
  if mysqladmin --protocol=tcp -h127.0.0.1 -P"${MARIADB_PORT:-3306}" -uroot ping >/dev/null 2>&1 \
     || mysqladmin -uroot ping >/dev/null 2>&1; then
    :
  else
    if [ ! -d "$STATE/mysql/mysql" ]; then
      mysql_install_db --user=mysql --datadir="$STATE/mysql" > "$STATE/log/mysql-install.log" 2>&1
    fi
    chown -R mysql:mysql "$STATE/mysql"
    mkdir -p /run/mysqld && chown mysql:mysql /run/mysqld
    (mariadbd --user=mysql --datadir="$STATE/mysql" --bind-address=127.0.0.1 --port="${MARIADB_PORT:-3306}" \
      --socket=/run/mysqld/mysqld.sock --pid-file=/run/mysqld/torchx-airflow.pid \
      > "$STATE/log/mariadb.log" 2>&1 &)
    wait_for mariadb 60 mysqladmin -uroot --socket=/run/mysqld/mysqld.sock ping
    log "mariadb started"
  fi
  mysql -uroot --socket=/run/mysqld/mysqld.sock <<SQL
CREATE DATABASE IF NOT EXISTS $DB_NAME;
CREATE USER IF NOT EXISTS '$DB_USER'@'localhost' IDENTIFIED BY '$DB_PASS';
CREATE USER IF NOT EXISTS '$DB_USER'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'localhost';
GRANT ALL ON $DB_NAME.* TO '$DB_USER'@'127.0.0.1';
FLUSH PRIVILEGES;
SQL
}

wait_for() {  # description, seconds, command...
  local what="$1" seconds="$2"; shift 2
  for _ in $(seq "$((seconds * 2))"); do
    if "$@" >/dev/null 2>&1; then return 0; fi
    sleep 0.5
  done
  echo "[slurm] $what did not come up in ${seconds}s; logs in $STATE/log" >&2
  tail -n 20 "$STATE"/log/*.log >&2 || true
  return 1
}

up() {
  need_root up
  install
  mkdir -p "$STATE"/{log,run}
  nodes_up
  write_configs
  start_munge
  start_mariadb
  # by pid file, not by name: a private cluster's daemons have the same names
  if ! alive slurmdbd; then
    slurmdbd
    wait_for slurmdbd 60 sacctmgr -i list cluster
    log "slurmdbd started"
  fi
  if ! sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER"; then
    sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  if ! alive slurmctld; then
    slurmctld
    wait_for slurmctld 60 scontrol ping
    log "slurmctld started"
  fi
  start_slurmds
  wait_for_nodes
  log "cluster $CLUSTER up: $(sinfo -h -o '%P %D nodes %c cpus %m MB %a' | paste -sd ';')"
}

start_slurmds() {  # this host's slurmd and the namespace nodes' ones that are not running
  if ! alive "slurmd-$HOST" && ! alive slurmd; then  # slurmd.pid: started by an earlier version
    slurmd
    log "slurmd $HOST started"
  fi
  [ "$NS_ACTIVE" = 1 ] && ns_start_slurmds
  return 0
}

wait_for_nodes() {  # every node of the cluster up (a node set down earlier is resumed)
  local nodes
  nodes="$(sinfo -h -N -o %N | sort -u | paste -sd,)"
  scontrol update nodename="${nodes:-$HOST}" state=resume >/dev/null 2>&1 || true
  wait_for "nodes ${nodes:-$HOST}" 60 sh -c "sinfo -h -N -o %T | grep -q . && ! sinfo -h -N -o %T | grep -vEq '^(idle|mixed|allocated)\$'"
}

alive() {  # daemon: whether its pid file names a live process
  local pid
  pid="$(cat "$STATE/run/$1.pid" 2>/dev/null)" || return 1
  [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null
}

start_private() {  # the daemons of the private cluster that are not running; by pid file, never by name
  [ -f "$NS_FILE" ] && NS_ACTIVE=1
  if [ "$ACCOUNTING" != none ] && [ -f "$ETC/slurmdbd.conf" ] && ! alive slurmdbd; then
    slurmdbd
    wait_for slurmdbd 60 sacctmgr -i list cluster
    log "slurmdbd started ($ETC)"
  fi
  if ! alive slurmctld; then
    slurmctld
    wait_for slurmctld 60 scontrol ping
    log "slurmctld started ($ETC)"
  fi
  start_slurmds
}

up_private() {
  need_root up
  mkdir -p "$STATE"/{log,run}
  nodes_up
  write_configs
  [ "$ACCOUNTING" = none ] && rm -f "$ETC/slurmdbd.conf"
  start_munge
  if [ "$ACCOUNTING" != none ]; then
    start_mariadb
    slurmdbd
    wait_for slurmdbd 60 sacctmgr -i list cluster
    sacctmgr -n -P list cluster format=cluster | grep -qx "$CLUSTER" || sacctmgr -i add cluster "$CLUSTER" >/dev/null
  fi
  start_private
  wait_for_nodes
  log "private cluster $CLUSTER up: SLURM_CONF=$SLURM_CONF ($(sinfo -h -o '%P %D nodes' | paste -sd ';'))"
}

stop_private() {  # daemons...: SIGTERM by pid file, all at once, then wait until each has exited;
  # slurmd: every node's (slurmd.pid: one started by an earlier version of this script)
  local daemon pid file stopped=()
  for daemon in "$@"; do
    for file in "$STATE/run/$daemon.pid" "$STATE/run/$daemon"-*.pid; do
      [ "$daemon" = slurmd ] || [ "$file" = "$STATE/run/$daemon.pid" ] || continue
      pid="$(cat "$file" 2>/dev/null)" || continue
      kill "$pid" 2>/dev/null && stopped+=("$pid:$(basename "$file" .pid)")
    done
  done
  for daemon in "${stopped[@]}"; do
    pid="${daemon%%:*}"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    log "${daemon#*:} stopped ($ETC)"
  done
}

end_jobs() {  # the cluster's jobs end with it: cancelled while the controller answers
  local jobs
  jobs="$(timeout 20 squeue -h -o %A 2>/dev/null)" || return 0
  [ -n "$jobs" ] || return 0
  # shellcheck disable=SC2086 # one job id per word
  timeout 20 scancel --full $jobs 2>/dev/null || true
  for _ in $(seq 20); do [ -z "$(timeout 10 squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.5; done
  log "jobs cancelled: $(echo $jobs | wc -w)"
}

kill_tree() {  # a process and its descendants, children first (they are found through their parent)
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill -KILL "$1" 2>/dev/null || true
}

kill_steps() {  # a job step's slurmstepd outlives slurmd by design: what is left of this cluster's
  local pid step
  for pid in $(pgrep -x slurmstepd); do
    tr '\0' '\n' < "/proc/$pid/environ" 2>/dev/null | grep -qx "SLURM_CONF=$ETC/slurm.conf" || continue
    step="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)"
    kill_tree "$pid" && log "left over, killed: $step"
  done
}

down() {
  end_jobs
  stop_private slurmd slurmctld slurmdbd
  kill_steps
  ns_down
  if [ -f /run/mysqld/torchx-airflow.pid ]; then
    kill "$(cat /run/mysqld/torchx-airflow.pid)" 2>/dev/null && log "mariadb stopped" || true
  fi
  pkill -x munged 2>/dev/null && log "munged stopped" || true
  for _ in $(seq 40); do
    local alive=0
    for daemon in munged mariadbd; do
      pgrep -x "$daemon" >/dev/null && alive=1
    done
    [ "$alive" = 0 ] && return 0
    sleep 0.5
  done
}

status() {
  sinfo -h >/dev/null 2>&1 && sacct -n -X -S now-1minutes >/dev/null 2>&1
}

need_private() {
  [ "$PRIVATE" = 1 ] || { echo "[slurm] $1 is for a private cluster: add --private" >&2; exit 2; }
}

case "$COMMAND" in
  install) install ;;
  up) if [ "$PRIVATE" = 1 ]; then up_private; else up; fi ;;
  down) if [ "$PRIVATE" = 1 ]; then end_jobs; stop_private slurmd slurmctld slurmdbd; kill_steps; ns_down; else down; fi ;;
  stop) need_private stop; stop_private "$@" ;;
  start) need_private start; [ -f "$ETC/slurmdbd.conf" ] || ACCOUNTING=none; start_private ;;
  status) status ;;
  *) echo "usage: $0 install|up|down|status [--single-node] [--private [--no-accounting|--no-job-comment] [--multinode]] | stop DAEMON... | start" >&2; exit 2 ;;
esac
