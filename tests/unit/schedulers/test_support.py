"""The scheduler layer's registry (torchx_airflow/schedulers/__init__.py): each scheduler's support class,
the default for the others, and no TorchX scheduler imported to find them."""

from __future__ import annotations

import subprocess
import sys

from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers import support_for


def test_support_for_picks_the_schedulers_module_and_the_default_otherwise():
    hook = TorchXHook()
    assert type(hook.support("slurm")).__name__ == "SlurmSupport"
    assert type(hook.support("local_cwd")).__name__ == "LocalSupport"
    assert type(hook.support("kubernetes")).__name__ == "KubernetesSupport"
    assert support_for("slurm", hook.runner).inherits_launcher_env
    assert support_for("local_cwd", hook.runner).inherits_launcher_env
    for name in ("kubernetes", "aws_batch", "local_docker"):
        assert not support_for(name, hook.runner).inherits_launcher_env, name
    hook.close()


def test_scheduler_modules_import_no_torchx_scheduler():
    code = (
        "import sys, torchx_airflow.schedulers, torchx_airflow.schedulers.slurm, "
        "torchx_airflow.schedulers.local, torchx_airflow.schedulers.env;"
        "print([m for m in sys.modules if m.startswith('torchx.schedulers') or m == 'torchx.runner'])"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
