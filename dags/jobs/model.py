"""The example pipeline's model and data, shared by train.py and evaluate.py: a tiny MLP regressor."""

from __future__ import annotations

import csv

import torch
from torch import nn


def make_model(hidden: int = 16) -> nn.Module:
    """y = f(x) for one input and one output: small enough to train in seconds on a CPU."""
    return nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, 1))


def load_data(path: str) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``x`` and ``y`` columns of data.csv (written by prepare.py) as ``(n, 1)`` float tensors."""
    with open(path, newline="") as f:
        rows = [(float(row["x"]), float(row["y"])) for row in csv.DictReader(f)]
    if not rows:
        raise SystemExit(f"{path!r} holds no rows: run prepare.py with --rows 10 or more")
    data = torch.tensor(rows, dtype=torch.float32)
    return data[:, :1], data[:, 1:]


def mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    """Mean squared error of ``model`` on ``(x, y)``."""
    with torch.no_grad():
        return float(nn.functional.mse_loss(model(x), y))
