"""What the Kubernetes support refuses before any call to a cluster: an app whose pods the cluster
would refuse for their names (found at the dry run), and a bearer token bound for a plain-http API
server (it would travel in clear text)."""

from __future__ import annotations

import pytest
from torchx.specs import AppDef, Role

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers import SchedulerCredentials
from torchx_airflow.schedulers.kubernetes import MAX_POD_NAME, new_api_client


def _app(name: str) -> AppDef:
    return AppDef(name, roles=[Role("trainer", image="python:3.11", entrypoint="python", args=["-c", "1"])])


def _dryrun(name: str):
    hook = TorchXHook("torchx_default", scheduler="kubernetes", cfg={"queue": "default", "namespace": "ml"})
    return hook.dryrun(_app(name))


def test_an_app_name_the_cluster_would_refuse_for_its_pods_fails_the_dry_run_naming_the_fix():
    _dryrun("a" * 30)  # <job: name + suffix>-trainer-0-0 fits
    with pytest.raises(TorchXConfigError, match=rf"is \d+ characters.*{MAX_POD_NAME} at most.*app_name"):
        _dryrun("a" * 70)


@pytest.mark.parametrize("host", ["http://k8s.example:6443", "HTTP://10.0.0.1"])
def test_a_bearer_token_for_a_plain_http_api_server_is_refused_before_any_request(
    host, tmp_path, monkeypatch
):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(TorchXConfigError, match="not an https:// address: the token would travel in clear"):
        new_api_client(SchedulerCredentials(host=host, token="s3cr3t-token"))
    client = new_api_client(SchedulerCredentials(host="https://k8s.example:6443", token="s3cr3t-token"))
    assert client.configuration.host == "https://k8s.example:6443"
