#!/usr/bin/env bash
# Prepare the Airflow home ($AIRFLOW_HOME, git-ignored): SQLite metadata DB and the torchx_default
# connection (local_cwd). Safe to run again: it reuses what exists.
set -euo pipefail
: "${AIRFLOW_HOME:?set AIRFLOW_HOME}"
mkdir -p "$AIRFLOW_HOME"
airflow db migrate > "$AIRFLOW_HOME/db-migrate.log" 2>&1 || { cat "$AIRFLOW_HOME/db-migrate.log"; exit 1; }
if ! airflow connections get torchx_default > /dev/null 2>&1; then
  airflow connections add torchx_default --conn-type torchx \
    --conn-extra '{"scheduler": "local_cwd"}' > /dev/null
fi
echo "Airflow home ready: $AIRFLOW_HOME (connection torchx_default -> local_cwd)"
