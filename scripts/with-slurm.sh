#!/usr/bin/env bash
# Run a command with the Slurm cluster up: the one that answers, or one started here (as root) and
# stopped again afterwards, whatever the command's outcome. Without root and without a cluster, the
# command runs as it is (the Slurm tests then skip and say why).
#   scripts/with-slurm.sh python -m pytest ...
set -uo pipefail
CLUSTER="$(cd "$(dirname "$0")" && pwd)/slurm/cluster.sh"
started=0
if ! bash "$CLUSTER" status >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
  bash "$CLUSTER" up && started=1
fi
"$@"
status=$?
if [ "$started" = 1 ]; then bash "$CLUSTER" down; fi
exit "$status"
