"""torchx-airflow-tracker's stores in TorchX's plugin registry (TorchX main scans this namespace
package, ``torchx_plugins.tracker``): see ``torchx_airflow_tracker.plugins``."""

from __future__ import annotations

from torchx_airflow_tracker.plugins import namespace_plugins

# TorchX's scanner collects the decorated callables among this module's attributes
globals().update(namespace_plugins(__name__))
