"""Where neither TorchX distribution is installed, Airflow still loads the provider, and the first
``import torchx`` names both install commands of the package that needs it."""

from __future__ import annotations

import subprocess
import sys

HIDE_TORCHX = """
import importlib.machinery as machinery
real = machinery.PathFinder.find_spec.__func__
def hidden(cls, name, path=None, target=None):
    return None if name == "torchx" or name.startswith("torchx.") else real(cls, name, path, target)
machinery.PathFinder.find_spec = classmethod(hidden)
"""

IMPORT_TORCHX = "try:\n    import torchx.runner\nexcept ModuleNotFoundError as e:\n    print(e)\n"


def _run(code: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-c", HIDE_TORCHX + code], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_provider_loads_and_the_first_torchx_import_names_both_installs():
    out = _run(
        "import torchx_airflow, torchx_airflow.get_provider_info as info\n"
        "print(info.get_provider_info()['package-name'])\n"
        "from torchx_airflow.operators.torchx import TorchXOperator\n" + IMPORT_TORCHX
    )
    assert out.startswith("torchx-airflow\n"), out
    assert (
        "pip install 'torchx-airflow[torchx-nightly]'" in out
        and "pip install 'torchx-airflow[torchx]'" in out
    )


def test_the_tracker_package_alone_names_its_own_installs():
    out = _run("import torchx_airflow_tracker\n" + IMPORT_TORCHX)
    assert "pip install 'torchx-airflow-tracker[torchx-nightly]'" in out, out
