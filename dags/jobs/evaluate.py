"""Pipeline step 3: load every trained model, score it on the data, pick the best, record the report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from model import load_data, make_model, mse  # the job's own directory is on sys.path
from torchx.tracker.api import AppRun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="data.csv written by prepare")
    parser.add_argument("--models", required=True, help="comma-separated model.pt paths from train")
    parser.add_argument("--out", required=True, help="directory for report.json")
    args = parser.parse_args()

    torch.set_num_threads(1)
    x, y = load_data(args.data)
    paths = [p for p in args.models.split(",") if p]
    if not paths:
        raise SystemExit("no models to evaluate: --models is empty")
    scores = []
    for path in paths:
        checkpoint = torch.load(path, weights_only=True)  # written by train.py: tensors and numbers only
        model = make_model()
        model.load_state_dict(checkpoint["state_dict"])
        scores.append({"model": path, "lr": checkpoint["lr"], "loss": mse(model.eval(), x, y)})
        print(f"lr={checkpoint['lr']}: loss {scores[-1]['loss']:.5f} ({path})", flush=True)
    best = min(scores, key=lambda s: s["loss"])

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = out / "report.json"
    report.write_text(json.dumps({"best": best, "scores": scores}, indent=2))

    run = AppRun.run_from_env()
    run.add_metadata(best_lr=best["lr"], best_loss=best["loss"], models=len(scores))
    run.add_artifact("report", str(report), {"format": "json"})
    run.add_artifact("best_model", best["model"], {"lr": best["lr"]})
    print(f"best: lr={best['lr']} loss={best['loss']:.5f}; report {report}", flush=True)


if __name__ == "__main__":
    main()
