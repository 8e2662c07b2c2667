"""A TorchX job for the OpenLineage tests: shows the OpenLineage parent it got, records an artifact.

``openlineage_job.py NAME OUT_DIR [--consume PATH ...] [--fail]``: writes ``OUT_DIR/NAME.bin`` and
records it as artifact ``out``; with ``--fail`` exits 3 before recording anything.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from torchx.tracker.api import AppRun

parser = argparse.ArgumentParser()
parser.add_argument("name")
parser.add_argument("out_dir")
parser.add_argument("--consume", action="append", default=[])
parser.add_argument("--fail", action="store_true")
args = parser.parse_args()

for var in ("OPENLINEAGE_PARENT_ID", "OPENLINEAGE_ROOT_PARENT_ID"):
    print(f"{args.name}: {var}={os.environ.get(var, '<unset>')}", flush=True)
for path in args.consume:
    print(f"{args.name}: consumed {Path(path).read_text()}", flush=True)
if args.fail:
    print(f"{args.name}: failing on purpose", flush=True)
    sys.exit(3)
out = Path(args.out_dir) / f"{args.name}.bin"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text(f"written by {args.name}")
run = AppRun.run_from_env()
run.add_artifact("out", str(out), {"step": args.name})
print(f"{args.name}: recorded {out}", flush=True)
