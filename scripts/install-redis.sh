#!/usr/bin/env bash
# Debian's redis-server, the Celery broker of `make up EXECUTOR=celery`. Needs root; does nothing when
# redis-server is already there. The stack runs its own redis-server on a loopback port
# (scripts/airflow-stack.sh), so the distribution's service is stopped if the package started it.
set -euo pipefail
if command -v redis-server > /dev/null && command -v redis-cli > /dev/null; then exit 0; fi
if [ "$(id -u)" != 0 ]; then
  echo "redis-server is not installed and installing it needs root: sudo apt-get install redis-server" >&2
  exit 2
fi
export DEBIAN_FRONTEND=noninteractive
log=/tmp/torchx-airflow-redis-apt.log
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server redis-tools > "$log" 2>&1 \
  || { cat "$log" >&2; exit 1; }
if command -v systemctl > /dev/null && systemctl is-active --quiet redis-server 2> /dev/null; then
  systemctl disable --now redis-server > /dev/null 2>&1 || true
elif [ -x /etc/init.d/redis-server ]; then
  /etc/init.d/redis-server stop > /dev/null 2>&1 || true
fi
