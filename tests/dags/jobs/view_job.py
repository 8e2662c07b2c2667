"""A TorchX job for the lineage view tests: records one artifact under a name the DAG gives it."""

from __future__ import annotations

import sys

from torchx.tracker.api import AppRun

step, artifact, path = sys.argv[1:4]
run = AppRun.run_from_env()
run.add_metadata(step=step)
run.add_artifact(artifact, path, {"step": step})
print(f"{step}: recorded {artifact} at {path} for {run.job_id()}", flush=True)
