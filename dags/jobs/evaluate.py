"""Pipeline step 3: score every trained model on the data, pick the best, record the report."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from torchx.tracker.api import AppRun
from train import load, mse  # noqa: I001 - the job's own directory is on sys.path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="data.csv written by prepare")
    parser.add_argument("--models", required=True, help="comma-separated model.json paths from train")
    parser.add_argument("--out", required=True, help="directory for report.json")
    args = parser.parse_args()

    points = load(args.data)
    scores = []
    for path in filter(None, args.models.split(",")):
        model = json.loads(Path(path).read_text())
        scores.append({"model": path, "lr": model["lr"], "loss": mse(points, model["w"], model["b"])})
        print(f"lr={model['lr']}: loss {scores[-1]['loss']:.5f}", flush=True)
    if not scores:
        raise SystemExit("no models to evaluate: --models is empty")
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
