"""A TorchX job that records its run through TorchX's own AppRun API (the backends come from env)."""

from __future__ import annotations

import os
import sys
import time

from torchx.tracker.api import AppRun

run = AppRun.run_from_env()
out = sys.argv[1]
with open(out, "w") as f:
    f.write("weights")
run.add_metadata(lr=float(sys.argv[2]), loss=0.125, rank=int(os.environ.get("RANK", "0")))
run.add_artifact("model", out, {"format": "txt"})
time.sleep(float(os.environ.get("TRACKED_JOB_SLEEP", "0")))  # a job that lasts, for deferred waits
print(f"tracked {run.job_id()} with {len(list(run.backends))} backends", flush=True)
