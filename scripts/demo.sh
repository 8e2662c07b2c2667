#!/usr/bin/env bash
# Run the example pipeline end to end on TorchX's local_cwd scheduler, show what the jobs did,
# print the lineage graph of its last app (evaluate) from the tracker store Airflow configured, and
# compare the train runs (their metrics, and the one promoted to the asset).
# DEMO_DAG picks another example DAG, DEMO_CONF (JSON) sets its params (the README's test uses both).
set -euo pipefail
log="$AIRFLOW_HOME/demo.log"
dag="${DEMO_DAG:-torchx_pipeline}"
echo "Running DAG $dag with 'airflow dags test' (full log: $log)..."
status=0
airflow dags test "$dag" ${DEMO_CONF:+--conf "$DEMO_CONF"} > "$log" 2>&1 || status=$?
# The interesting lines: each app's handle and parents, its output ([role/replica] lines, with torchrun's
# [rank]: prefix in the DDP train apps: both ranks, the loss per epoch), its final state.
job_lines='\] \[[A-Za-z0-9_-]+/[0-9]+\] (\[[0-9]+\]:)?(rank|epoch|model|wrote|lr=|best|hello)'
grep -E "Submitted TorchX app|Tracked .* with parents|$job_lines|TorchX app .* is [A-Z]+|Promoted |DagRun Finished" "$log" \
  | sed -E 's/^[0-9TZ:.-]+ \[[a-z ]+\] //; s/ +\[airflow[^]]*\].*$//; s/, run_start_date.*(state=[a-z]+).*/ \1/'
if [ "$status" -ne 0 ] || ! grep -q "DagRun Finished.*state=success" "$log"; then
  echo "The demo DAG run did not succeed; see $log" >&2
  exit 1
fi
# The run's last app (evaluate in the pipeline, report in torchx_taskflow): its lineage reaches back to
# every app before it.
last="$(grep -E "Submitted TorchX app [a-z_]+://" "$log" | tail -1 | sed -E 's/.*Submitted TorchX app ([^ ]+).*/\1/')"
store="$(airflow connections get torchx_fsspec_default -o json | python -c \
  'import json, sys; print(json.load(sys.stdin)[0]["extra_dejson"]["root"])')"
echo
echo "Lineage of the run's last app, read from the fsspec tracker store $store:"
torchx-airflow-tracker --fsspec "$store" lineage "$last"
echo
echo "Its metadata and artifacts (also in its task's XCom):"
torchx-airflow-tracker --fsspec "$store" show "$last"
# The sweep: one row per train app, with the metrics it logged and the run promote picked.
trains="$(grep -oE "Submitted TorchX app [a-z_]+://[^ ]+/train-[a-z0-9]+" "$log" | sed -E 's/.* //' | awk '!seen[$0]++')"
if [ -n "$trains" ]; then
  echo
  echo "The train runs compared (metrics from the tracker store; promote picks the lowest loss):"
  # shellcheck disable=SC2086 # one argument per handle
  python "$(dirname "$0")/demo_compare.py" "$store" $trains
  echo
  echo "In the UI (make up, then http://localhost:8080): DAG $dag > a run > task train > the"
  echo "'TorchX compare' tab shows these runs side by side (curves, diff, a Promote button per row);"
  echo "Assets > model://torchx_pipeline/promoted lists the promotion, torchx_promoted_model deploys it."
fi
