"""TorchX tracker backends with complete lineage, for code inside TorchX jobs.

Never imports Airflow: install it in a training image next to torchx. Jobs use TorchX's own API::

    from torchx.tracker import app_run_from_env

    run = app_run_from_env()
    run.add_metadata(lr=0.1, loss=0.42)
    run.add_artifact("model", "s3://bucket/model.pt")
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

__version__ = "0.1.0"

# TorchX comes from one of two distributions (the extras `torchx` and `torchx-nightly`), so neither is
# a plain dependency. Without either, the first import of torchx (every store's module) fails naming both.
if find_spec("torchx") is None:
    from torchx_airflow_tracker.compat import TorchXMissingFinder

    sys.meta_path.append(TorchXMissingFinder("torchx-airflow-tracker"))
