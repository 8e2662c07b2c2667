"""A resumable trial of a sweep (tests/dags/torchx_sweep_dags.py): trains up to the budget in
TORCHX_AIRFLOW_TRIAL from the checkpoint in TORCHX_AIRFLOW_RESUME_FROM (when it is its own trial's),
burns 0.2 s of CPU an epoch it trains, and records val_loss, the epochs it trained, a checkpoint and
a model; with ``--series`` it also logs val_loss at each epoch it trains (its part of the trial's
curve, for the sweep view).
With ``--hold DIR`` it waits, before writing its outputs, while ``DIR/<trial id>-r<rung>`` exists (at most
5 minutes): a test holds a segment's job running until it removes that file
(tests/e2e/test_celery_kills.py kills the worker of a held segment).

Its loss is a known curve per configuration: a learning rate of 0.1 learns fast and stops early
(three of its configurations lead after one epoch), 0.03 learns slower and ends best, so the best
configuration after 9 epochs (lr=0.03, width=16, depth=2) is only 4th after one.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time
from pathlib import Path

from torchx.tracker.api import AppRun


def loss(lr: float, width: int, depth: int, epochs: float) -> float:
    tau = {0.01: 4.0, 0.03: 1.5, 0.1: 0.6}[lr]
    wp, dp = abs(math.log2(width / 16)), abs(depth - 2)
    a = {0.01: 0.10, 0.03: 0.12, 0.1: 0.25}[lr] + (0.4 if lr == 0.1 else 0.03) * wp + 0.02 * dp
    b = {0.01: 1.0, 0.03: 0.9, 0.1: 0.8}[lr] * (1 + 0.1 * dp)
    return a + b * math.exp(-epochs / tau)


parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--width", type=int, required=True)
parser.add_argument("--depth", type=int, required=True)
parser.add_argument("--out", required=True)
parser.add_argument("--hold", help="wait while HOLD/<trial id>-r<rung> exists (a test's gate)")
parser.add_argument("--series", action="store_true", help="log val_loss at each epoch it trains")
args = parser.parse_args()
trial = json.loads(os.environ["TORCHX_AIRFLOW_TRIAL"])
budget = int(trial["budget"])
start = 0
resume = os.environ.get("TORCHX_AIRFLOW_RESUME_FROM")
if resume and Path(resume).is_file():
    state = json.loads(Path(resume).read_text())
    if state.get("trial") == trial["id"]:  # only its own trial's checkpoint; else it starts over
        start = int(state["epoch"])
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
value = loss(args.lr, args.width, args.depth, budget)
burn = time.process_time() + 0.2 * (budget - start)  # an epoch costs 0.2 s of CPU
while time.process_time() < burn:
    pass
if args.hold:
    gate, deadline = Path(args.hold) / f"{trial['id']}-r{trial['rung']}", time.monotonic() + 300
    if gate.exists():
        print(f"trial {trial['id']} rung {trial['rung']}: held until {gate} is removed", flush=True)
    while gate.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
(out / "checkpoint.json").write_text(json.dumps({"trial": trial["id"], "epoch": budget}))
(out / "model.txt").write_text(f"lr={args.lr} width={args.width} depth={args.depth} epochs={budget}")
if args.series:  # its part of the trial's curve
    from torchx_airflow_tracker.metrics import log_metrics

    for epoch in range(start + 1, budget + 1):
        log_metrics(epoch, val_loss=loss(args.lr, args.width, args.depth, epoch))
run = AppRun.run_from_env()
run.add_metadata(val_loss=value, epochs_trained=budget - start, resumed_at=start)
run.add_artifact("checkpoint", str(out / "checkpoint.json"))
run.add_artifact("model", str(out / "model.txt"))
print(f"trial {trial['id']} rung {trial['rung']}: epochs {start}->{budget}, val_loss {value:.4f}", flush=True)
