"""The torchx connection's Kubernetes form fields: into cfg and the client's kubeconfig, or refused."""

from __future__ import annotations

import pytest

from torchx_airflow.exceptions import TorchXConnectionError
from torchx_airflow.settings.connection import TorchXConnectionSettings


def _settings(**extra) -> TorchXConnectionSettings:
    return TorchXConnectionSettings.from_extra("k8s", {"scheduler": "kubernetes", **extra})


def test_the_run_option_fields_fill_cfg_and_kubeconfig_is_kept_apart():
    settings = _settings(
        namespace="training",
        queue="gpu",
        service_account="torchx-jobs",
        priority_class="high",
        kubeconfig="/etc/airflow/kubeconfig",
        cfg={"image_repo": "example.com/repo"},
    )
    assert settings.cfg == {
        "image_repo": "example.com/repo",
        "namespace": "training",
        "queue": "gpu",
        "service_account": "torchx-jobs",
        "priority_class": "high",
    }
    assert (settings.namespace, settings.queue, settings.kubeconfig) == (
        "training",
        "gpu",
        "/etc/airflow/kubeconfig",
    )
    # the form stores empty fields as "" and prefixed keys: both are understood
    form = _settings(**{"extra__torchx__queue": "q", "namespace": "", "kubeconfig": "in-cluster"})
    assert form.cfg == {"queue": "q"} and form.kubeconfig == "in-cluster"
    assert _settings(queue="q", cfg={"queue": "q"}).cfg == {"queue": "q"}  # the same value twice


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"scheduler": "slurm", "queue": "q"}, r"'queue' is a setting of the kubernetes scheduler.*'slurm'"),
        ({"queue": "a", "cfg": {"queue": "b"}}, r"extra 'queue' is 'a' but extra 'cfg' says queue='b'"),
        ({"namespace": 3}, r"extra 'namespace': 3 is not of type 'string'.*Write it as: Kubernetes"),
        ({"kubeconfig": "kube/config"}, r"'kubeconfig' must be an absolute path .* or 'in-cluster'"),
    ],
)
def test_bad_kubernetes_fields_are_refused_naming_the_fix(extra, message):
    with pytest.raises(TorchXConnectionError, match=message):
        TorchXConnectionSettings.from_extra("k8s", {"scheduler": "kubernetes", **extra})
