"""Pipeline step 1: write a small regression dataset (y = sin(2.5x) + 0.5x + noise), record it with AppRun."""

from __future__ import annotations

import argparse
import csv
import math
import random
from pathlib import Path

from torchx.tracker.api import AppRun


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", required=True, help="directory for data.csv")
    parser.add_argument("--rows", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = out / "data.csv"
    with data.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["x", "y"])
        for _ in range(args.rows):
            x = rng.uniform(-2, 2)
            writer.writerow([f"{x:.6f}", f"{math.sin(2.5 * x) + 0.5 * x + rng.gauss(0, 0.1):.6f}"])

    run = AppRun.run_from_env()
    run.add_metadata(rows=args.rows, seed=args.seed)
    run.add_artifact("data", str(data), {"format": "csv", "rows": args.rows})
    print(f"wrote {args.rows} rows to {data}", flush=True)


if __name__ == "__main__":
    main()
