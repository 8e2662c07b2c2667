#!/usr/bin/env bash
# Run a command with the Kubernetes test cluster up: the one that answers, or one started here (as
# root; the first start on a machine builds kube-apiserver, before the command and outside its
# timeouts) and stopped again afterwards, whatever the command's outcome. Without root and without a
# cluster, the command runs as it is (the Kubernetes tests then skip and say why).
#   scripts/k8s/with-cluster.sh python -m pytest ...
set -uo pipefail
CLUSTER="$(cd "$(dirname "$0")" && pwd)/cluster.sh"
started=0
if ! bash "$CLUSTER" status > /dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  bash "$CLUSTER" up > /dev/null && started=1
fi
if [ -f "${K8S_STATE:-/var/tmp/torchx-airflow-k8s}/kubeconfig" ]; then
  export KUBECONFIG="${K8S_STATE:-/var/tmp/torchx-airflow-k8s}/kubeconfig"
fi
"$@"
status=$?
if [ "$started" = 1 ]; then bash "$CLUSTER" down; fi
exit "$status"
