"""Apache Airflow provider for PyTorch TorchX.

Importing this package is cheap: no TorchX scheduler, MLflow, s3fs or docker module is imported
until a task runs, so DAG files that use the operators parse fast.
"""

from __future__ import annotations

import sys
from importlib.util import find_spec

__version__ = "0.1.0"

# TorchX comes from one of two distributions (the extras `torchx` and `torchx-nightly`), so neither is
# a plain dependency. Without either, the first import of torchx fails naming both. Not this package's
# own import: Airflow imports it for the provider info in every command and does not guard that.
if find_spec("torchx") is None:
    from torchx_airflow_tracker.compat import TorchXMissingFinder

    # the provider's fix first: importing the tracker package above added its own finder
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, TorchXMissingFinder)]
    sys.meta_path.append(TorchXMissingFinder("torchx-airflow"))
