"""A job that writes where its environment says (``JOB_OUT``), not where its arguments do, records
that file as its artifact ``out``, and appends its name (``--name``) to the ledger ``CACHE_LEDGER``
names."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from torchx.tracker.api import AppRun

parser = argparse.ArgumentParser()
parser.add_argument("--name", required=True)
args = parser.parse_args()
with open(os.environ["CACHE_LEDGER"], "a") as ledger:
    ledger.write(f"{args.name}\n")
out = Path(os.environ["JOB_OUT"]) / f"{args.name}.txt"
out.parent.mkdir(parents=True, exist_ok=True)
out.write_text("trained\n")
AppRun.run_from_env().add_artifact("out", str(out))
print(f"wrote {out}", flush=True)
