#!/usr/bin/env bash
# A Kubernetes API server with Volcano's CRDs, for tests and local use, on loopback only:
#
#   scripts/k8s/cluster.sh up       build kube-apiserver once per machine (root), start etcd, the API
#                                   server and the stand-in for Volcano's controller and the kubelet;
#                                   the last line printed is `export KUBECONFIG=<path>`
#   scripts/k8s/cluster.sh down     stop them again
#   scripts/k8s/cluster.sh status   exit 0 when the API server answers and the stand-in runs
#   scripts/k8s/cluster.sh stop-apiserver | start-apiserver
#                                   the API server alone (an outage: etcd and the stand-in go on)
#
# Real: kube-apiserver (Debian bookworm's kubernetes 1.20 source, scripts/k8s/build-apiserver.sh),
# etcd (Debian's etcd-server), the CRDs' schema validation, token authentication, RBAC
# (scripts/k8s/rbac.yaml), service-account keys. A stand-in: Volcano's job controller and scheduler
# and the kubelet (tests/kubernetes/standin.py): it turns each Volcano Job into pods and runs each
# pod's command as a local process on this host (no image is pulled), writes pod and job status
# through the API, serves container logs to the API server's pod-log proxy, honours abort and delete,
# and treats a deleted (evicted) pod as Volcano does.
#
# Tokens (in $K8S_STATE/tokens.csv): admin (system:masters; the kubeconfig's), worker (the user
# torchx-worker, bound to scripts/k8s/rbac.yaml in the namespace default), nobody (no rights).
#
# K8S_STATE (/var/tmp/torchx-airflow-k8s) holds everything this writes; K8S_PORT (16443) the API
# server's port, K8S_ETCD_PORT (12379; +1 for peers), K8S_KUBELET_PORT (16250) the stand-in's.
# K8S_OWNER_PID: when set, the stand-in stops the whole cluster once that process is gone.
set -euo pipefail

HERE="$(cd "$(dirname "$0")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
STATE="${K8S_STATE:-/var/tmp/torchx-airflow-k8s}"
CACHE="${K8S_CACHE:-/var/cache/torchx-airflow/k8s}"
PORT="${K8S_PORT:-16443}"
ETCD_PORT="${K8S_ETCD_PORT:-12379}"
KUBELET_PORT="${K8S_KUBELET_PORT:-16250}"
APISERVER="$CACHE/bin/kube-apiserver"
KUBECONFIG_PATH="$STATE/kubeconfig"
PY="${K8S_PYTHON:-/usr/bin/python3}"

say() { echo "[k8s] $*" >&2; }

running() {  # running NAME: the process of $STATE/NAME.pid is alive
  local pid
  pid=$(cat "$STATE/$1.pid" 2> /dev/null) || return 1
  kill -0 "$pid" 2> /dev/null
}

stop() {  # stop NAME: TERM, then KILL after 10 s, the process group of $STATE/NAME.pid
  local pid i
  pid=$(cat "$STATE/$1.pid" 2> /dev/null) || return 0
  if kill -0 "$pid" 2> /dev/null; then
    kill -TERM -- "-$pid" 2> /dev/null || kill -TERM "$pid" 2> /dev/null || true
    for i in $(seq 100); do kill -0 "$pid" 2> /dev/null || break; sleep 0.1; done
    kill -KILL -- "-$pid" 2> /dev/null || kill -KILL "$pid" 2> /dev/null || true
  fi
  rm -f "$STATE/$1.pid"
}

kubectl_() { kubectl --kubeconfig "$KUBECONFIG_PATH" "$@"; }

api_ready() { kubectl_ get --raw=/readyz > /dev/null 2>&1; }

status() {
  running etcd && running apiserver && running standin && api_ready
}

install() {
  bash "$HERE/build-apiserver.sh" >&2
  if ! command -v kubectl > /dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends kubernetes-client > /dev/null
  fi
  command -v openssl > /dev/null || apt-get install -y -qq openssl > /dev/null
}

certificates() {  # a CA, the API server's serving certificate (also the stand-in kubelet's), SA keys
  [ -f "$STATE/pki/server.crt" ] && return 0
  mkdir -p "$STATE/pki"
  (
    cd "$STATE/pki"
    openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt -days 3650 \
      -subj "/CN=torchx-airflow-test-ca" 2> /dev/null
    openssl req -newkey rsa:2048 -nodes -keyout server.key -out server.csr -subj "/CN=kube-apiserver" 2> /dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost,DNS:kubernetes.default.svc\n' > san.ext
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt -days 3650 \
      -extfile san.ext 2> /dev/null
    openssl genrsa -out sa.key 2048 2> /dev/null
    openssl rsa -in sa.key -pubout -out sa.pub 2> /dev/null
    chmod 600 ./*.key
  )
}

tokens() {
  [ -f "$STATE/tokens.csv" ] && return 0
  local admin worker nobody
  admin=$(openssl rand -hex 24) worker=$(openssl rand -hex 24) nobody=$(openssl rand -hex 24)
  umask 077
  {
    echo "$admin,admin,uid-admin,\"system:masters\""
    echo "$worker,torchx-worker,uid-torchx-worker"
    echo "$nobody,nobody,uid-nobody"
  } > "$STATE/tokens.csv"
  printf '%s\n' "$admin" > "$STATE/admin.token"
  printf '%s\n' "$worker" > "$STATE/worker.token"
  printf '%s\n' "$nobody" > "$STATE/nobody.token"
}

kubeconfig() {
  umask 077
  cat > "$KUBECONFIG_PATH" <<KC
apiVersion: v1
kind: Config
clusters:
- name: torchx-airflow-test
  cluster:
    server: https://127.0.0.1:$PORT
    certificate-authority: $STATE/pki/ca.crt
users:
- name: admin
  user:
    token: $(cat "$STATE/admin.token")
contexts:
- name: torchx-airflow-test
  context: {cluster: torchx-airflow-test, user: admin, namespace: default}
current-context: torchx-airflow-test
KC
}

start() {  # start NAME CMD...: in its own session, output to NAME.log, pid to NAME.pid
  local name=$1
  shift
  setsid "$@" >> "$STATE/$name.log" 2>&1 < /dev/null &
  echo $! > "$STATE/$name.pid"
}

wait_for() {  # wait_for SECONDS WHAT CMD...
  local seconds=$1 what=$2 i
  shift 2
  for i in $(seq $((seconds * 5))); do
    "$@" && return 0
    sleep 0.2
  done
  say "$what did not come up within $seconds s; see $STATE/*.log"
  return 1
}

start_apiserver() {
  # --endpoint-reconciler-type=none: no `kubernetes` service endpoint to keep (no kube-proxy here);
  # ServiceAccount admission is off: without kube-controller-manager no token secrets are made.
  start apiserver "$APISERVER" --bind-address=127.0.0.1 --advertise-address=127.0.0.1 \
    --secure-port="$PORT" --insecure-port=0 --etcd-servers="http://127.0.0.1:$ETCD_PORT" \
    --token-auth-file="$STATE/tokens.csv" --authorization-mode=RBAC \
    --tls-cert-file="$STATE/pki/server.crt" --tls-private-key-file="$STATE/pki/server.key" \
    --service-account-key-file="$STATE/pki/sa.pub" --service-account-signing-key-file="$STATE/pki/sa.key" \
    --service-account-issuer=https://kubernetes.default.svc --api-audiences=https://kubernetes.default.svc \
    --service-cluster-ip-range=10.96.0.0/16 --endpoint-reconciler-type=none \
    --disable-admission-plugins=ServiceAccount --kubelet-preferred-address-types=InternalIP \
    --allow-privileged=true
  wait_for 90 "kube-apiserver" api_ready
}

up() {
  if status; then
    say "already up"
    echo "export KUBECONFIG=$KUBECONFIG_PATH"
    return 0
  fi
  [ "$(id -u)" = 0 ] || [ -x "$APISERVER" ] || { say "the first start builds kube-apiserver: run as root"; exit 1; }
  install
  mkdir -p "$STATE"
  down_quiet
  certificates
  tokens
  kubeconfig
  start etcd etcd --name torchx-airflow-test --data-dir "$STATE/etcd" \
    --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
    --listen-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-advertise-peer-urls "http://127.0.0.1:$((ETCD_PORT + 1))" \
    --initial-cluster "torchx-airflow-test=http://127.0.0.1:$((ETCD_PORT + 1))"
  wait_for 30 etcd "$PY" -c "import urllib.request as r; r.urlopen('http://127.0.0.1:$ETCD_PORT/health', timeout=2)" \
    2> /dev/null
  start_apiserver
  # RBAC's bootstrap roles are written a moment after /readyz
  wait_for 30 "RBAC bootstrap" kubectl_ get clusterrole system:basic-user -o name > /dev/null 2>&1
  kubectl_ apply -f "$HERE/crds.yaml" > /dev/null 2>&1 || {
    # the Queue objects need their CRD established first
    wait_for 30 "Volcano CRDs" kubectl_ get crd queues.scheduling.volcano.sh > /dev/null 2>&1
    sleep 1
    kubectl_ apply -f "$HERE/crds.yaml" > /dev/null
  }
  kubectl_ apply -f "$HERE/rbac.yaml" > /dev/null
  K8S_OWNER_PID="${K8S_OWNER_PID:-}" start standin "$PY" "$REPO/tests/kubernetes/standin.py" \
    --kubeconfig "$KUBECONFIG_PATH" --state "$STATE" --kubelet-port "$KUBELET_PORT"
  wait_for 30 "stand-in" kubectl_ get node standin-node -o name > /dev/null 2>&1
  say "up: API server https://127.0.0.1:$PORT, state in $STATE"
  echo "export KUBECONFIG=$KUBECONFIG_PATH"
}

down_quiet() {
  stop standin
  stop apiserver
  stop etcd
}

down() {
  down_quiet
  # the cluster's content goes with it: a next `up` starts from an empty etcd
  rm -rf "$STATE/etcd" "$STATE/pods"
  say "down"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  status) status ;;
  # the API server alone, for tests of an outage: etcd, the stand-in and its pods go on meanwhile
  stop-apiserver) stop apiserver ;;
  start-apiserver) running apiserver || start_apiserver ;;
  install) install ;;
  *) echo "usage: $0 up|down|status|install|stop-apiserver|start-apiserver" >&2; exit 2 ;;
esac
