"""A TorchX job for the lineage tests: shows what tracking env it got, records itself with AppRun.

It prints its MLflow password on purpose: the tests check that the task log shows *** instead.
"""

from __future__ import annotations

import os
import sys

from torchx.tracker.api import AppRun

name = sys.argv[1]
for var in ("TORCHX_TRACKERS", "TORCHX_PARENT_RUN_ID", "MLFLOW_TRACKING_PASSWORD"):
    print(f"{name}: {var}={os.environ.get(var, '<unset>')}", flush=True)
run = AppRun.run_from_env()
run.add_metadata(step=name, backends=len(list(run.backends)))
run.add_artifact("out", f"/data/{name}.bin", {"step": name})
print(f"{name}: recorded {run.job_id()}", flush=True)
