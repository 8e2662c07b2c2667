#!/usr/bin/env bash
# Prepare the Airflow home ($AIRFLOW_HOME, git-ignored): SQLite metadata DB and the example
# connections. Safe to run again: it reuses what exists and adds only what is missing.
#   torchx_default         scheduler local_cwd, tracking to the two stores below
#   torchx_fsspec_default  fsspec tracker store in $AIRFLOW_HOME/tracker
#   mlflow_default         MLflow tracking store $AIRFLOW_HOME/mlflow.db (MLFLOW_TRACKING_URI overrides;
#                          with SYNC_MLFLOW_DEFAULT=1 an existing mlflow_default is pointed at it)
# A connection defined in the environment (AIRFLOW_CONN_<ID>) is left to it. The connections are
# written in one Python process: each `airflow connections` command costs an interpreter start and
# Airflow's import (2-3 s, more on a busy machine).
set -euo pipefail
: "${AIRFLOW_HOME:?set AIRFLOW_HOME}"
mkdir -p "$AIRFLOW_HOME"
home="$(cd "$AIRFLOW_HOME" && pwd)"
airflow db migrate > "$home/db-migrate.log" 2>&1 || { cat "$home/db-migrate.log"; exit 1; }

HOME_DIR="$home" python - <<'PY'
import json
import os

from sqlalchemy import select

from airflow.models.connection import Connection
from airflow.utils.session import create_session

home = os.environ["HOME_DIR"]
mlflow_uri = os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{home}/mlflow.db"
wanted = [
    Connection(
        conn_id="torchx_default",
        conn_type="torchx",
        extra=json.dumps({"scheduler": "local_cwd", "trackers": ["torchx_fsspec_default", "mlflow_default"]}),
    ),
    Connection(conn_id="torchx_fsspec_default", conn_type="torchx_fsspec", extra=json.dumps({"root": f"{home}/tracker"})),
    Connection(conn_id="mlflow_default", conn_type="mlflow", host=mlflow_uri, extra=json.dumps({"experiment": "torchx"})),
]
with create_session() as session:
    for conn in wanted:
        if f"AIRFLOW_CONN_{conn.conn_id.upper()}" in os.environ:
            continue
        stored = session.scalar(select(Connection).where(Connection.conn_id == conn.conn_id).limit(1))
        if stored is None:
            session.add(conn)
        elif conn.conn_id == "mlflow_default" and os.environ.get("SYNC_MLFLOW_DEFAULT") == "1":
            stored.host = mlflow_uri
PY
echo "Airflow home ready: $home (connections torchx_default, torchx_fsspec_default, mlflow_default)"
