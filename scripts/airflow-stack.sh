#!/usr/bin/env bash
# Run Airflow's services (API server, scheduler, DAG processor, triggerer) in the background from an
# Airflow home on the home's SQLite DB, with the LocalExecutor (default) or the CeleryExecutor.
#
#   scripts/airflow-stack.sh up                  set up the home, start every service, wait until healthy
#   scripts/airflow-stack.sh down                stop every service this home started
#   scripts/airflow-stack.sh start <service>     start one (api-server|scheduler|dag-processor|triggerer|
#                                                triggerer-<n>|redis|worker-<n>)
#   scripts/airflow-stack.sh stop <service> [--kill]   stop one (SIGTERM, or SIGKILL with --kill)
#   scripts/airflow-stack.sh status              which services run
#
# EXECUTOR=celery (for `up`; later commands use the executor, ports and number of workers the home
# was started with, unless given again) scales out:
# Debian's redis-server on 127.0.0.1:$REDIS_PORT as the Celery broker (installed by
# scripts/install-redis.sh when missing, as root), and CELERY_WORKERS workers (`airflow celery
# worker`, service worker-<n>, Celery node name worker-<n>@<host>, which is also the hostname the
# worker records on the task instances it runs). Celery's task results go to a database result
# backend, as Airflow recommends: SQLite in $AIRFLOW_HOME/stack/celery-results.db, apart from
# Airflow's own DB so that the workers' result writes do not queue behind the scheduler's.
#
# With MLFLOW_PORT set, an MLflow tracking server (SQLite backend: $AIRFLOW_HOME/mlflow.db, artifacts
# in $AIRFLOW_HOME/mlflow-artifacts) runs too, and the connection mlflow_default points at it.
#
# Settings (environment): AIRFLOW_HOME (required), AIRFLOW_PORT (API server and UI, default 8080),
# AIRFLOW_LOG_PORT (log server of the LocalExecutor or of worker-1; the triggerer's is the next port,
# worker-<n>'s is AIRFLOW_LOG_PORT + n for n >= 2; default 8793), AIRFLOW_ADMIN_PASSWORD (the UI/API
# login "admin"; default: generated once and kept in the home), EXECUTOR (local|celery),
# REDIS_PORT (default 6379), CELERY_WORKERS (default 2), AIRFLOW__CELERY__WORKER_CONCURRENCY
# (task slots per worker, default 4), MLFLOW_WORKERS (the MLflow server's uvicorn workers, default 1:
# one process serves requests on threads; each more worker is one more ~200 MB process). `start triggerer-<n>` (n >= 2) runs one more triggerer beside
# `triggerer`, serving its logs on TRIGGERER_LOG_PORT + n - 1 (default: the triggerer's port + n - 1).
# STACK_OWNER_PID (the tests set it): every service goes when that process ends, however it ends; a
# watchdog (tests/watchdog.py, service `watchdog`) started with the first service stops them all.
# Pid files and service logs live in $AIRFLOW_HOME/stack/.
set -euo pipefail
SCRIPTS="$(cd "$(dirname "$0")" && pwd)"
: "${AIRFLOW_HOME:?set AIRFLOW_HOME}"
mkdir -p "$AIRFLOW_HOME"
HOME_DIR="$(cd "$AIRFLOW_HOME" && pwd)"
STACK="$HOME_DIR/stack"
# `up` records the ports it started with (and the number of workers): every later command of the home
# defaults to them, so `start api-server` after `up` with AIRFLOW_PORT=8181 serves on 8181 again
if [ "${1:-}" != up ] && [ -f "$STACK/settings" ]; then . "$STACK/settings"; fi
PORT="${AIRFLOW_PORT:-8080}"
LOG_PORT="${AIRFLOW_LOG_PORT:-8793}"
REDIS_PORT="${REDIS_PORT:-6379}"
CELERY_WORKERS="${CELERY_WORKERS:-2}"
mkdir -p "$STACK"
# `up` starts the executor asked for; every later command acts on the one the home was started with.
if [ "${1:-}" = up ]; then EXECUTOR="${EXECUTOR:-local}"
else EXECUTOR="${EXECUTOR:-$(cat "$STACK/executor" 2>/dev/null || echo local)}"; fi
case "$EXECUTOR" in
  local|celery) ;;
  *) echo "EXECUTOR must be local or celery, got '$EXECUTOR'" >&2; exit 2 ;;
esac
WORKERS=()
[ "$EXECUTOR" = celery ] && for n in $(seq "$CELERY_WORKERS"); do WORKERS+=("worker-$n"); done
SERVICES=()
[ "$EXECUTOR" = celery ] && SERVICES+=(redis)
SERVICES+=(api-server scheduler dag-processor triggerer "${WORKERS[@]}")
[ -n "${MLFLOW_PORT:-}" ] && SERVICES+=(mlflow)
# MLflow's server runs from an environment of its own, with the full mlflow (`make install` builds it
# beside the venv: <venv>-mlflow, whose client is mlflow-skinny); MLFLOW_SERVER_PYTHON names another.
if [ -n "${MLFLOW_PORT:-}" ] && { [ "${1:-}" = up ] || [ "${2:-}" = mlflow ]; }; then
  MLFLOW_SERVER_PYTHON="${MLFLOW_SERVER_PYTHON:-$(python -c 'import sys; print(sys.prefix)')-mlflow/bin/python}"
  if [ ! -x "$MLFLOW_SERVER_PYTHON" ]; then
    echo "no Python for the MLflow server at $MLFLOW_SERVER_PYTHON: run \`make install\` (it builds that" \
      "environment) or set MLFLOW_SERVER_PYTHON to a Python with the full mlflow installed" >&2
    exit 2
  fi
fi
# Services (and the tasks they run) work in the home, never in the checkout: a Slurm job writes its
# output files into the directory it was submitted from.
cd "$HOME_DIR"

secret() {  # a value generated once per home
  local file="$STACK/$1"
  [ -s "$file" ] || python -c 'import secrets; print(secrets.token_urlsafe(24))' > "$file"
  cat "$file"
}

export AIRFLOW_HOME="$HOME_DIR"
# The stack's database, unless one is configured, is SQLite in the home; every service writes to it, so
# a connection waits up to 60 s for another's write lock instead of Python's 5 s (past which a busy
# moment fails a request, a REST call with HTTP 500 "database is locked").
if [ -z "${AIRFLOW__DATABASE__SQL_ALCHEMY_CONN:-}" ]; then
  export AIRFLOW__DATABASE__SQL_ALCHEMY_CONN="sqlite:///$HOME_DIR/airflow.db?timeout=60"
fi
# MLflow's usage telemetry is off in every service, task and job of the stack (jobs inherit the switch):
# its client pops a variable from the environment in a background thread when it cannot fetch its
# config, racing the threads that read or swap the environment. MLFLOW_DISABLE_TELEMETRY=false keeps it.
export MLFLOW_DISABLE_TELEMETRY="${MLFLOW_DISABLE_TELEMETRY:-true}"
if [ "$EXECUTOR" = celery ]; then
  export AIRFLOW__CORE__EXECUTOR=CeleryExecutor
  export AIRFLOW__CELERY__BROKER_URL="redis://127.0.0.1:$REDIS_PORT/0"
  export AIRFLOW__CELERY__RESULT_BACKEND="db+sqlite:///$STACK/celery-results.db"
  export AIRFLOW__CELERY__WORKER_CONCURRENCY="${AIRFLOW__CELERY__WORKER_CONCURRENCY:-4}"
  # A task waiting for its TorchX app in the worker (deferrable=False) holds its Celery message until
  # the app ends; Redis hands an unacknowledged message to another worker after this many seconds.
  export AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT="${AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT:-604800}"
else
  export AIRFLOW__CORE__EXECUTOR=LocalExecutor
fi
export AIRFLOW__API__HOST=127.0.0.1
export AIRFLOW__API__PORT="$PORT"
export AIRFLOW__API__BASE_URL="http://127.0.0.1:$PORT"
export AIRFLOW__CORE__EXECUTION_API_SERVER_URL="http://127.0.0.1:$PORT/execution/"
export AIRFLOW__API_AUTH__JWT_SECRET="$(secret jwt-secret)"
# More users (user:role[:teams]) get passwords generated by the API server into passwords.json.
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS="${AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS:-admin:admin}"
export AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE="$STACK/passwords.json"
export AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="$LOG_PORT"
export AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="$((LOG_PORT + 1))"
export AIRFLOW__CORE__PARALLELISM="${AIRFLOW__CORE__PARALLELISM:-8}"
export AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL="${AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL:-10}"
export AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION="${AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION:-False}"
PASSWORD="${AIRFLOW_ADMIN_PASSWORD:-$(secret admin-password)}"
printf '{"admin": "%s"}\n' "$PASSWORD" > "$STACK/passwords.json"

worker_log_port() {  # worker-1 takes the LocalExecutor's port, worker-<n> AIRFLOW_LOG_PORT + n
  local n="${1#worker-}"
  if [ "$n" = 1 ]; then echo "$LOG_PORT"; else echo "$((LOG_PORT + n))"; fi
}

start_worker() {  # worker-<n>: its own Celery node name, task-instance hostname, log port and pid file
  local service="$1" node
  node="$service@$(hostname)"
  AIRFLOW_WORKER_HOSTNAME="$node" \
  AIRFLOW__CORE__HOSTNAME_CALLABLE=airflow_worker_hostname.worker_hostname \
  PYTHONPATH="$SCRIPTS${PYTHONPATH:+:$PYTHONPATH}" \
  AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT="$(worker_log_port "$service")" \
    setsid airflow celery worker --celery-hostname "$node" --pid "$STACK/$service.celery.pid" \
      >> "$STACK/$service.log" 2>&1 < /dev/null &
}

start_redis() {  # the broker, on loopback only, its dump file in the stack directory
  bash "$SCRIPTS/install-redis.sh"
  setsid redis-server --bind 127.0.0.1 --port "$REDIS_PORT" --protected-mode yes --dir "$STACK" \
    --dbfilename redis.rdb >> "$STACK/redis.log" 2>&1 < /dev/null &
}

wait_redis() {
  for _ in $(seq 60); do
    [ "$(redis-cli -h 127.0.0.1 -p "$REDIS_PORT" ping 2>/dev/null)" = PONG ] && return 0
    sleep 0.5
  done
  echo "redis-server did not answer on 127.0.0.1:$REDIS_PORT in 30 s; log: $STACK/redis.log" >&2
  tail -n 20 "$STACK/redis.log" >&2
  return 1
}

pid_of() { [ -s "$STACK/$1.pid" ] && cat "$STACK/$1.pid"; }
running() { local pid; pid="$(pid_of "$1")" && kill -0 "$pid" 2>/dev/null; }

start() {
  local service="$1"
  if [ -n "${STACK_OWNER_PID:-}" ] && [ "$service" != watchdog ] && ! running watchdog; then start watchdog; fi
  if running "$service"; then echo "$service already running (pid $(pid_of "$service"))"; return; fi
  if [ "$service" = watchdog ]; then
    setsid python -I "$SCRIPTS/../tests/watchdog.py" "${STACK_OWNER_PID:?the watchdog guards STACK_OWNER_PID}" \
      --pid-dir "$STACK" >> "$STACK/$service.log" 2>&1 < /dev/null &
  elif [ "$service" = redis ]; then
    start_redis
  elif [[ "$service" == worker-* ]]; then
    start_worker "$service"
  elif [[ "$service" == triggerer-* ]]; then
    AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT="$((${TRIGGERER_LOG_PORT:-$((LOG_PORT + 1))} + ${service#triggerer-} - 1))" \
      setsid airflow triggerer >> "$STACK/$service.log" 2>&1 < /dev/null &
  elif [ "$service" = mlflow ]; then
    # uvicorn restarts a worker that misses a health check (5 s by default): too short on a busy machine.
    # MLflow's job runner (huey consumers for GenAI evaluation and trace jobs, about 1.2 GB) stays off:
    # nothing here submits such jobs. scripts/mlflow-server.py is `mlflow server` that becomes its
    # uvicorn: no idle parent of about 200 MB behind it.
    UVICORN_TIMEOUT_WORKER_HEALTHCHECK="${UVICORN_TIMEOUT_WORKER_HEALTHCHECK:-60}" \
    MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}" \
    setsid "$MLFLOW_SERVER_PYTHON" "$SCRIPTS/mlflow-server.py" --host 127.0.0.1 --port "$MLFLOW_PORT" --workers "${MLFLOW_WORKERS:-1}" \
      --backend-store-uri "sqlite:///$HOME_DIR/mlflow.db" --default-artifact-root "$HOME_DIR/mlflow-artifacts" \
      >> "$STACK/$service.log" 2>&1 < /dev/null &
  else
    setsid airflow "$service" >> "$STACK/$service.log" 2>&1 < /dev/null &
  fi
  echo $! > "$STACK/$service.pid"
  echo "$service started (pid $!, log $STACK/$service.log)"
  if [ "$service" = redis ]; then wait_redis; fi
}

stop() {  # signal, then services: signalled together, each SIGKILLed if still there after 30 s
  local signal="$1" service pid
  shift
  local signalled=()
  for service in "$@"; do
    pid="$(pid_of "$service")" || continue
    kill -0 "$pid" 2>/dev/null || continue
    kill "-$signal" -- "-$pid" 2>/dev/null || kill "-$signal" "$pid" 2>/dev/null || true
    signalled+=("$service")
  done
  for service in "${signalled[@]}"; do
    pid="$(pid_of "$service")"
    for _ in $(seq 60); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
    echo "$service stopped"
  done
  for service in "$@"; do  # a SIGKILLed Celery worker leaves its own pid file behind
    rm -f "$STACK/$service.pid" "$STACK/$service.celery.pid"
  done
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

wait_mlflow() {  # the tasks' trackers need it from their first step
  [ -n "${MLFLOW_PORT:-}" ] || return 0
  for _ in $(seq 240); do
    python -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=2)' \
      "http://127.0.0.1:$MLFLOW_PORT/health" 2>/dev/null && return 0
    sleep 0.5
  done
  echo "MLflow did not answer on 127.0.0.1:$MLFLOW_PORT in 120 s; log: $STACK/mlflow.log" >&2
  tail -n 30 "$STACK/mlflow.log" >&2
  return 1
}

wait_workers() {  # every Celery worker answers a ping through the broker
  local nodes=() service
  for service in "${WORKERS[@]}"; do nodes+=("$service@$(hostname)"); done
  [ "${#nodes[@]}" -gt 0 ] || return 0
  if python - "${nodes[@]}" <<'PY'; then return 0; fi
import sys, time
from airflow.providers.celery.executors.celery_executor import app
nodes, deadline = set(sys.argv[1:]), time.monotonic() + 120
while time.monotonic() < deadline:
    answered = {name for reply in app.control.ping(timeout=1.0) for name in reply}
    if nodes <= answered:
        sys.exit(0)
    time.sleep(0.5)
sys.exit(f"Celery workers {sorted(nodes - answered)} did not answer in 120 s")
PY
  tail -n 30 "$STACK"/worker-*.log >&2
  return 1
}

case "${1:-}" in
  up)
    recorded="$(cat "$STACK/executor" 2>/dev/null || echo local)"
    if [ "$recorded" != "$EXECUTOR" ] && running scheduler; then
      echo "This home runs with EXECUTOR=$recorded: stop it first (make down)" >&2
      exit 2
    fi
    settings="$(
      for setting in "AIRFLOW_PORT=$PORT" "AIRFLOW_LOG_PORT=$LOG_PORT" "REDIS_PORT=$REDIS_PORT" \
        "CELERY_WORKERS=$CELERY_WORKERS" "MLFLOW_PORT=${MLFLOW_PORT:-}" "MLFLOW_WORKERS=${MLFLOW_WORKERS:-}"; do
        if [ -n "${setting#*=}" ]; then printf ': "${%s:=%q}"\n' "${setting%%=*}" "${setting#*=}"; fi
      done
    )"
    if running scheduler && [ -f "$STACK/settings" ] && [ "$(cat "$STACK/settings")" != "$settings" ]; then
      echo "This home runs with other ports or workers ($STACK/settings): stop it first (make down)" >&2
      exit 2
    fi
    echo "$EXECUTOR" > "$STACK/executor"
    echo "$settings" > "$STACK/settings"
    if [ -n "${MLFLOW_PORT:-}" ]; then export MLFLOW_TRACKING_URI="http://127.0.0.1:$MLFLOW_PORT"; fi
    # with MLFLOW_PORT, mlflow_default points at the stack's MLflow server
    SYNC_MLFLOW_DEFAULT="$([ -n "${MLFLOW_PORT:-}" ] && echo 1 || echo 0)" bash "$SCRIPTS/airflow-home.sh"
    for service in "${SERVICES[@]}"; do start "$service"; done
    wait_healthy
    wait_workers
    wait_mlflow
    echo
    echo "Airflow is up: http://127.0.0.1:$PORT  (login: admin / $PASSWORD; $AIRFLOW__CORE__EXECUTOR)"
    [ "$EXECUTOR" = celery ] && echo "Celery:        ${WORKERS[*]} on broker redis://127.0.0.1:$REDIS_PORT"
    [ -n "${MLFLOW_PORT:-}" ] && echo "MLflow is up:  http://127.0.0.1:$MLFLOW_PORT"
    echo "Stop everything with: make down"
    ;;
  down)  # whatever this home started, in either mode; the broker once the workers are gone
    workers=()
    for pid_file in "$STACK"/worker-*.pid "$STACK"/triggerer-*.pid; do
      [[ -e "$pid_file" && "$pid_file" != *.celery.pid ]] && workers+=("$(basename "$pid_file" .pid)")
    done
    stop TERM "${workers[@]}" api-server scheduler dag-processor triggerer mlflow
    stop TERM redis
    stop TERM watchdog ;;
  start) start "${2:?service}" ;;
  stop) stop "$([ "${3:-}" = --kill ] && echo KILL || echo TERM)" "${2:?service}" ;;
  status) for service in "${SERVICES[@]}"; do
            if running "$service"; then echo "$service running"; else echo "$service stopped"; fi
          done ;;
  *) echo "usage: $0 up|down|start <service>|stop <service> [--kill]|status" >&2; exit 2 ;;
esac
