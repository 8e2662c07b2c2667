#!/usr/bin/env bash
# Docker's engine, docker-compose and debootstrap from Debian's packages, and a running dockerd: what
# the compose test (tests/compose) needs on a Debian machine. Needs root; installs only what is missing
# and starts dockerd only when none answers (without systemd, in the background, logging to $LOG).
#   bash scripts/install-docker.sh
set -euo pipefail
LOG="${DOCKERD_LOG:-/var/log/torchx-airflow-dockerd.log}"
need=()
command -v dockerd > /dev/null || need+=(docker.io)
{ docker compose version > /dev/null 2>&1 || command -v docker-compose > /dev/null; } || need+=(docker-compose)
command -v debootstrap > /dev/null || need+=(debootstrap)
if [ "${#need[@]}" -gt 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    echo "missing ${need[*]}; installing needs root: sudo apt-get install -y ${need[*]}" >&2
    exit 2
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt_log=/tmp/torchx-airflow-docker-apt.log
  { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need[@]}" iptables; } \
    > "$apt_log" 2>&1 || { cat "$apt_log" >&2; exit 1; }
fi
if docker info > /dev/null 2>&1; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "no Docker daemon answers and starting one needs root: sudo dockerd" >&2
  exit 2
fi
if command -v systemctl > /dev/null && [ -d /run/systemd/system ]; then
  systemctl start docker
else
  # setsid: the daemon outlives the shell (and the test run) that started it, like a system service
  setsid dockerd > "$LOG" 2>&1 < /dev/null &
fi
for _ in $(seq 60); do
  docker info > /dev/null 2>&1 && exit 0
  sleep 1
done
echo "dockerd did not answer within 60 s; its log ($LOG):" >&2
tail -30 "$LOG" >&2
exit 1
