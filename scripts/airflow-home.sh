#!/usr/bin/env bash
# Prepare the Airflow home ($AIRFLOW_HOME, git-ignored): SQLite metadata DB and the example
# connections. Safe to run again: it reuses what exists and adds only what is missing.
#   torchx_default         scheduler local_cwd, tracking to the two stores below
#   torchx_fsspec_default  fsspec tracker store in $AIRFLOW_HOME/tracker
#   mlflow_default         MLflow tracking store $AIRFLOW_HOME/mlflow.db (MLFLOW_TRACKING_URI overrides)
set -euo pipefail
: "${AIRFLOW_HOME:?set AIRFLOW_HOME}"
mkdir -p "$AIRFLOW_HOME"
home="$(cd "$AIRFLOW_HOME" && pwd)"
airflow db migrate > "$home/db-migrate.log" 2>&1 || { cat "$home/db-migrate.log"; exit 1; }

add_connection() {  # id, then `airflow connections add` options
  local id="$1"; shift
  if ! airflow connections get "$id" > /dev/null 2>&1; then
    airflow connections add "$id" "$@" > /dev/null
  fi
}
add_connection torchx_default --conn-type torchx \
  --conn-extra '{"scheduler": "local_cwd", "trackers": ["torchx_fsspec_default", "mlflow_default"]}'
add_connection torchx_fsspec_default --conn-type torchx_fsspec --conn-extra "{\"root\": \"$home/tracker\"}"
add_connection mlflow_default --conn-type mlflow \
  --conn-host "${MLFLOW_TRACKING_URI:-sqlite:///$home/mlflow.db}" --conn-extra '{"experiment": "torchx"}'
echo "Airflow home ready: $home (connections torchx_default, torchx_fsspec_default, mlflow_default)"
