"""A job that records its ``checkpoint`` artifact inside or outside the task's checkpoint root.

For tests/slurm/test_slurm_resubmission.py. Every attempt first writes what it was given
(``seen-<attempt>.json`` in ``--out``: ``TORCHX_AIRFLOW_ATTEMPT`` and ``TORCHX_AIRFLOW_RESUME_FROM``)
and prints it. The first attempt then writes a checkpoint file and records it as artifact
``checkpoint``: ``--where inside`` puts it in ``--out`` (the task's output root, its default
``checkpoint_root``), ``--where outside`` in a sibling directory no argument names (as a job of
another team tracking to the same store could), and waits for the cluster to end it. A later
attempt only reports and exits 0: it never loads the file, so a path handed on is only recorded.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from torchx.tracker.api import AppRun

RESUME_FROM = "TORCHX_AIRFLOW_RESUME_FROM"
ATTEMPT = "TORCHX_AIRFLOW_ATTEMPT"

parser = argparse.ArgumentParser()
parser.add_argument("--out", required=True, help="an existing directory: the task's output root")
parser.add_argument("--where", choices=("inside", "outside"), required=True)
parser.add_argument("--seconds", type=float, default=120, help="how long the first attempt runs")
args = parser.parse_args()

out = Path(args.out)
attempt = os.environ.get(ATTEMPT, "1")
seen = {"attempt": attempt, "resume_from": os.environ.get(RESUME_FROM)}
(out / f"seen-{attempt}.json").write_text(json.dumps(seen))
print(f"attempt {attempt}: {RESUME_FROM}={seen['resume_from']!r}", flush=True)
if attempt == "1":
    # outside: a sibling of --out, so no argument of the job names it (the task's output root is --out)
    folder = out if args.where == "inside" else out.parent / f"{out.name}-elsewhere"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "checkpoint.pt"
    path.write_bytes(b"not a real checkpoint")
    AppRun.run_from_env().add_artifact("checkpoint", str(path), {"epoch": 1})
    print(f"recorded checkpoint {path}", flush=True)
    time.sleep(args.seconds)  # until the cluster ends it
