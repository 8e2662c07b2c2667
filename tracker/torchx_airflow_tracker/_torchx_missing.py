"""A clear error for an environment with neither TorchX distribution (see the package's __init__).

The provider has a copy of its own: this package never imports Airflow's, nor the provider this one.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType


class TorchXMissingFinder:
    """Last on ``sys.meta_path``: an import of ``torchx`` no other finder found fails with both fixes."""

    def __init__(self, distribution: str) -> None:
        self.distribution = distribution

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> None:
        if name != "torchx" and not name.startswith("torchx."):
            return None
        raise ModuleNotFoundError(
            f"{self.distribution} needs TorchX, and neither of its distributions is installed "
            f"(import of {name!r}). Install TorchX main, which installs under Airflow 3.3's constraints: "
            f"pip install '{self.distribution}[torchx-nightly]'; or the 0.7 release, which pins "
            f"urllib3<1.27: pip install '{self.distribution}[torchx]'",
            name=name,
        )
