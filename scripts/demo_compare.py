"""The comparison table of a sweep's runs, read from a tracker store: what `make demo` prints.

    python scripts/demo_compare.py STORE_ROOT HANDLE [HANDLE ...]

One row per run: its learning rate, its final metrics (``torchx_airflow.lineage.metrics``: what the
job logged and its numeric metadata), its ``train_loss`` curve from the first to the last epoch, and
whether it was promoted (tracker metadata ``airflow_promoted``, written by ``TorchXPromoteOperator``).
"""

from __future__ import annotations

import sys

from torchx_airflow_tracker.fsspec_store import FsspecStore

from torchx_airflow.lineage.keys import PROMOTED_KEY
from torchx_airflow.lineage.metrics import final_metrics, metric_series


def rows(store: FsspecStore, handles: list[str]) -> list[list[str]]:
    """The table's rows, a header first."""
    table = [["run", "lr", "loss", "train_loss (first -> last epoch)", "promoted"]]
    for handle in handles:
        final = final_metrics(store, handle)
        curve = metric_series(store, handle).get("train_loss", [])
        promoted = store.metadata(handle).get(PROMOTED_KEY)
        table.append(
            [
                handle,
                f"{final['lr']:g}" if "lr" in final else "-",
                f"{final['loss']:.5f}" if "loss" in final else "-",
                f"{curve[0][1]:.4f} -> {curve[-1][1]:.4f} ({len(curve)} epochs)" if curve else "-",
                f"yes, to {promoted['asset']}" if isinstance(promoted, dict) else "",
            ]
        )
    return table


def main(argv: list[str]) -> None:
    if len(argv) < 2:
        sys.exit(__doc__)
    table = rows(FsspecStore(argv[0]), argv[1:])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    for n, row in enumerate(table):
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            print("  ".join("-" * width for width in widths))


if __name__ == "__main__":
    main(sys.argv[1:])
