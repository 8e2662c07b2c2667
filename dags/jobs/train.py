"""Pipeline step 2: fit y = w*x + b by gradient descent at one learning rate; record loss and model."""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from torchx.tracker.api import AppRun


def load(path: str) -> list[tuple[float, float]]:
    with open(path, newline="") as f:
        return [(float(row["x"]), float(row["y"])) for row in csv.DictReader(f)]


def mse(points: list[tuple[float, float]], w: float, b: float) -> float:
    return sum((w * x + b - y) ** 2 for x, y in points) / len(points)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--data", required=True, help="data.csv written by prepare")
    parser.add_argument("--lr", type=float, required=True, help="learning rate")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--out", required=True, help="directory for model.json")
    args = parser.parse_args()

    points = load(args.data)
    w = b = 0.0
    for epoch in range(1, args.epochs + 1):
        n = len(points)
        grad_w = sum(2 * (w * x + b - y) * x for x, y in points) / n
        grad_b = sum(2 * (w * x + b - y) for x, y in points) / n
        w, b = w - args.lr * grad_w, b - args.lr * grad_b
        if epoch == 1 or epoch == args.epochs or epoch % 10 == 0:
            print(f"epoch {epoch}/{args.epochs} lr={args.lr} loss={mse(points, w, b):.5f}", flush=True)
    loss = mse(points, w, b)

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model = out / "model.json"
    model.write_text(json.dumps({"w": w, "b": b, "lr": args.lr, "epochs": args.epochs, "loss": loss}))

    run = AppRun.run_from_env()
    run.add_metadata(lr=args.lr, epochs=args.epochs, loss=loss)
    run.add_artifact("model", str(model), {"format": "json", "lr": args.lr})
    print(f"model w={w:.4f} b={b:.4f} loss={loss:.5f} -> {model}", flush=True)


if __name__ == "__main__":
    main()
