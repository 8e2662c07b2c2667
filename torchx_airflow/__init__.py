"""Apache Airflow provider for PyTorch TorchX.

Importing this package is cheap: no TorchX scheduler, MLflow, s3fs or docker module is imported
until a task runs, so DAG files that use the operators parse fast.
"""

from __future__ import annotations

__version__ = "0.1.0"
