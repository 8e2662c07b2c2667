"""A TorchX job that records through TorchX's AppRun which TorchX ran it and how it found its trackers."""

from __future__ import annotations

import os

import torchx
from torchx.tracker.api import AppRun

run = AppRun.run_from_env()
run.add_metadata(torchx_version=torchx.__version__, plugins_source=os.environ.get("TORCHX_PLUGINS_SOURCE"))
run.add_source("airflow://registry/run-1/prepare", "data")
print(f"tracked {run.job_id()} with {len(list(run.backends))} backends", flush=True)
