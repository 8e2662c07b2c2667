#!/usr/bin/env bash
# Run the example DAG end to end on TorchX's local_cwd scheduler and show what the jobs did.
set -euo pipefail
log="$AIRFLOW_HOME/demo.log"
echo "Running DAG torchx_hello with 'airflow dags test' (full log: $log)..."
status=0
airflow dags test torchx_hello > "$log" 2>&1 || status=$?
# The interesting lines: each app's handle, its output ([role/replica] lines) and final state.
grep -E "Submitted TorchX app|\] \[[A-Za-z0-9_-]+/[0-9]+\] |TorchX app .* is [A-Z]+|DagRun Finished" "$log" \
  | sed -E 's/^[0-9TZ:.-]+ \[[a-z ]+\] //; s/ +\[airflow[^]]*\].*$//; s/, run_start_date.*(state=[a-z]+).*/ \1/'
if [ "$status" -ne 0 ] || ! grep -q "DagRun Finished.*state=success" "$log"; then
  echo "The demo DAG run did not succeed; see $log" >&2
  exit 1
fi
