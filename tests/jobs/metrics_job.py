"""A TorchX job that logs a loss curve and final metrics from every rank (only rank 0's land).

    metrics_job.py <lr> <epochs>

The loss of epoch ``e`` is ``lr / e`` (exact in binary for the tests' rates), so a test knows every
value the job logged; it prints them as one JSON line too.
"""

from __future__ import annotations

import json
import os
import sys

from torchx_airflow_tracker.metrics import log_final_metrics, log_metrics

lr, epochs = float(sys.argv[1]), int(sys.argv[2])
curve = []
for epoch in range(1, epochs + 1):
    loss = lr / epoch
    log_metrics(epoch, train_loss=loss)  # every rank calls; rank 0 writes
    curve.append([epoch, loss])
log_final_metrics(val_loss=lr / (epochs + 1), epochs=epochs)
if os.environ.get("RANK", "0") == "0":
    print(
        "METRICS " + json.dumps({"series": {"train_loss": curve}, "val_loss": lr / (epochs + 1)}), flush=True
    )
