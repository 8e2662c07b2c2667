"""TorchX tracker backends with complete lineage, for code inside TorchX jobs.

Never imports Airflow: install it in a training image next to torchx. Jobs use TorchX's own API::

    from torchx.tracker import app_run_from_env

    run = app_run_from_env()
    run.add_metadata(lr=0.1, loss=0.42)
    run.add_artifact("model", "s3://bucket/model.pt")
"""

from __future__ import annotations

__version__ = "0.1.0"
