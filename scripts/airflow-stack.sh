#!/usr/bin/env bash
# Run Airflow's services (API server, scheduler, DAG processor, triggerer) in the background from an
# Airflow home, with LocalExecutor and the home's SQLite DB.
#
#   scripts/airflow-stack.sh up                  set up the home, start every service, wait until healthy
#   scripts/airflow-stack.sh down                stop every service this home started
#   scripts/airflow-stack.sh start <service>     start one (api-server|scheduler|dag-processor|triggerer)
#   scripts/airflow-stack.sh stop <service> [--kill]   stop one (SIGTERM, or SIGKILL with --kill)
#   scripts/airflow-stack.sh status              which services run
#
# With MLFLOW_PORT set, an MLflow tracking server (SQLite backend: $AIRFLOW_HOME/mlflow.db, artifacts
# in $AIRFLOW_HOME/mlflow-artifacts) runs too, and the connection mlflow_default points at it.
#
# Settings (environment): AIRFLOW_HOME (required), AIRFLOW_PORT (API server and UI, default 8080),
# AIRFLOW_LOG_PORT (the worker's log server; the triggerer's is the next port; default 8793),
# AIRFLOW_ADMIN_PASSWORD (the UI/API login "admin"; default: generated once and kept in the home).
# Pid files and service logs live in $AIRFLOW_HOME/stack/.
set -euo pipefail
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
: "${AIRFLOW_HOME:?set AIRFLOW_HOME}"
mkdir -p "$AIRFLOW_HOME"
HOME_DIR="$(cd "$AIRFLOW_HOME" && pwd)"
STACK="$HOME_DIR/stack"
PORT="${AIRFLOW_PORT:-8080}"
LOG_PORT="${AIRFLOW_LOG_PORT:-8793}"
SERVICES=(api-server scheduler dag-processor triggerer)
[ -n "${MLFLOW_PORT:-}" ] && SERVICES+=(mlflow)
mkdir -p "$STACK"
# Services (and the tasks they run) work in the home, never in the checkout: a Slurm job writes its
# output files into the directory it was submitted from.
cd "$HOME_DIR"

secret() {  # a value generated once per home
  local file="$STACK/$1"
  [ -s "$file" ] || python -c 'import secrets; print(secrets.token_urlsafe(24))' > "$file"
  cat "$file"
}

export AIRFLOW_HOME="$HOME_DIR"
export AIRFLOW__CORE__EXECUTOR=LocalExecutor
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__API_AUTH__JWT_SECRET="$(secret jwt-secret)"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="admin:admin"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$STACK/passwords.json"
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="$LOG_PORT"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="$((LOG_PORT + 1))"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-8}"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-10}"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
PASSWORD="${AIRFLOW_ADMIN_PASSWORD:-$(secret admin-password)}"
printf '{"admin": "%s"}\n' "$PASSWORD" > "$STACK/passwords.json"

pid_of() { [ -s "$STACK/$1.pid" ] && cat "$STACK/$1.pid"; }
running() { local pid; pid="$(pid_of "$1")" && kill -0 "$pid" 2>/dev/null; }

start() {
  local service="$1"
  if running "$service"; then echo "$service already running (pid $(pid_of "$service"))"; return; fi
  if [ "$service" = mlflow ]; then
    setsid mlflow server --host 127.0.0.1 --port "$MLFLOW_PORT" --workers 2 \
      --backend-store-uri "sqlite:///$HOME_DIR/mlflow.db" --default-artifact-root "$HOME_DIR/mlflow-artifacts" \
      >> "$STACK/$service.log" 2>&1 < /dev/null &
  else
    setsid airflow "$service" >> "$STACK/$service.log" 2>&1 < /dev/null &
  fi
  echo $! > "$STACK/$service.pid"
  echo "$service started (pid $!, log $STACK/$service.log)"
}

stop() {
  local service="$1" signal="${2:-TERM}" pid
  pid="$(pid_of "$service")" || return 0
  if kill -0 "$pid" 2>/dev/null; then
    kill "-$signal" -- "-$pid" 2>/dev/null || kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
    echo "$service stopped"
  fi
  rm -f "$STACK/$service.pid"
}

wait_healthy() {
  local url="http://127.0.0.1:$PORT/api/v2/monitor/health"
  for _ in $(seq 240); do
    if python - "$url" <<'PY' 2>/dev/null; then return 0; fi
import json, sys, urllib.request
health = json.load(urllib.request.urlopen(sys.argv[1], timeout=2))
ok = [health[k]["status"] == "healthy" for k in ("metadatabase", "scheduler", "triggerer", "dag_processor")]
sys.exit(0 if all(ok) else 1)
PY
    sleep 0.5
  done
  echo "Airflow did not become healthy in 120 s; logs in $STACK" >&2
  tail -n 30 "$STACK"/*.log >&2
  return 1
}

case "${1:-}" in
  up)
    if [ -n "${MLFLOW_PORT:-}" ]; then export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"; fi
    bash "$SCRIPTS/airflow-home.sh"
    if [ -n "${MLFLOW_PORT:-}" ] && [ "$(airflow connections get mlflow_default -o json 2>/dev/null \
         | python -c 'import json,sys; print(json.load(sys.stdin)[0]["host"])')" != "$MLFLOW_TRACKING_URI" ]; then
      airflow connections delete mlflow_default > /dev/null 2>&1 || true
      airflow connections add mlflow_default --conn-type mlflow --conn-host "$MLFLOW_TRACKING_URI" \
        --conn-extra '{"experiment": "torchx"}' > /dev/null
    fi
    for service in "${SERVICES[@]}"; do start "$service"; done
    wait_healthy
    echo
    echo "Airflow is up: http://127.0.0.1:$PORT  (login: admin / $PASSWORD)"
    [ -n "${MLFLOW_PORT:-}" ] && echo "MLflow is up:  http://127.0.0.1:$MLFLOW_PORT"
    echo "Stop everything with: make down"
    ;;
  down) for service in "${SERVICES[@]}"; do stop "$service"; done ;;
  start) start "${2:?service}" ;;
  stop) stop "${2:?service}" "$([ "${3:-}" = --kill ] && echo KILL || echo TERM)" ;;
  status) for service in "${SERVICES[@]}"; do
            if running "$service"; then echo "$service running"; else echo "$service stopped"; fi
          done ;;
  *) echo "usage: $0 up|down|start <service>|stop <service> [--kill]|status" >&2; exit 2 ;;
esac
