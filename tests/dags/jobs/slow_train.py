"""A train step that takes a while: prints numbered lines for ``--seconds``, then fits nothing, and
records its data and model with TorchX's AppRun (for tests that kill a worker while the task waits)."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from torchx.tracker.api import AppRun

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=3)
parser.add_argument("--data", required=True, help="data.csv written by the pipeline's prepare.py")
parser.add_argument("--out", required=True, help="directory for model.json")
args = parser.parse_args()
steps = max(1, int(args.seconds))
for i in range(1, steps + 1):
    print(f"line {i}/{steps}", flush=True)
    time.sleep(args.seconds / steps)
rows = len(Path(args.data).read_text().splitlines()) - 1
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
model = out / "model.json"
model.write_text(json.dumps({"rows": rows}))
run = AppRun.run_from_env()
run.add_metadata(rows=rows, seconds=args.seconds)
run.add_artifact("model", str(model), {"format": "json"})
print(f"trained on {rows} rows -> {model}", flush=True)
