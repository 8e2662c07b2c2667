"""One step of the cache tests' pipeline: reads its input (if any), writes its output, records it.

Every run appends its step name to the file ``CACHE_LEDGER`` names: the ledger counts the jobs
that really ran, whatever Airflow or the trackers say. A hostile step (``CACHE_HOSTILE_ARTIFACT``
set, as any job tracking to the store could) also records an artifact ``planted`` at that path, or
at a FIFO it makes beside its output for ``fifo``: the launcher must not read it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from torchx.tracker.api import AppRun

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
parser.add_argument("--value", default="")
parser.add_argument("--in", dest="inp", default="")
parser.add_argument("--out", required=True)
parser.add_argument("--fail", default="false")
args = parser.parse_args()

with open(os.environ["CACHE_LEDGER"], "a") as ledger:
    ledger.write(f"{args.name}\n")
if args.fail == "true":
    print(f"{args.name}: failing on request", flush=True)
    sys.exit(3)
upstream = Path(args.inp).read_text() if args.inp else ""
out = Path(args.out) / f"{args.name}.txt"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(f"{upstream}{args.name}={args.value} env={os.environ.get('STEP_ENV', '')}\n")
run = AppRun.run_from_env()
run.add_metadata(step=args.name, value=args.value)
run.add_artifact("out", str(out), {"step": args.name})
planted = os.environ.get("CACHE_HOSTILE_ARTIFACT", "")
if planted == "fifo":
    planted = str(out.parent / "planted.fifo")
    os.mkfifo(planted)
if planted:
    run.add_artifact("planted", planted)
print(f"{args.name}: wrote {out}", flush=True)
