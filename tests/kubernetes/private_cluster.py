"""A private Kubernetes test cluster, for the tests that stop its API server or run an Airflow stack
against it: the shared one (tests/kubernetes/conftest.py) serves every other test meanwhile.

Started by the same ``scripts/k8s/cluster.sh up`` with a state directory and ports of its own
(``K8S_STATE``, ``K8S_PORT``, ``K8S_ETCD_PORT`` and the one after it, ``K8S_KUBELET_PORT``); it stops
with the test process (``K8S_OWNER_PID``) even when that is killed. Starting one takes about 10 s.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.kubernetes.conftest import CLUSTER
from tests.services import free_port

GROUP, VERSION, PLURAL = "batch.volcano.sh", "v1alpha1", "jobs"


def _two_free_ports() -> int:
    """The first of two consecutive free loopback ports (etcd's client and peer ports)."""
    while True:
        base = free_port()
        with contextlib.ExitStack() as stack:
            try:
                for port in (base, base + 1):
                    sock = stack.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            except OSError:
                continue
        return base


class PrivateCluster:
    """One private cluster; ``kubeconfig`` is its admin's."""

    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="txk8s-", dir="/var/tmp"))
        self.env = {
            "K8S_STATE": str(self.state),
            "K8S_PORT": str(free_port()),
            "K8S_ETCD_PORT": str(_two_free_ports()),
            "K8S_KUBELET_PORT": str(free_port()),
            "K8S_OWNER_PID": str(os.getpid()),
        }
        self.kubeconfig = self.state / "kubeconfig"

    def script(self, *args: str, timeout: float = 300) -> None:
        proc = subprocess.run(
            ["bash", str(CLUSTER), *args],
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"cluster.sh {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}")

    def stop_api_server(self) -> None:
        self.script("stop-apiserver")

    def start_api_server(self) -> None:
        self.script("start-apiserver")

    def custom_objects(self) -> Any:
        from kubernetes import client, config

        return client.CustomObjectsApi(config.new_client_from_config(str(self.kubeconfig)))

    def jobs(self, namespace: str = "default") -> dict[str, dict]:
        """The namespace's Volcano Jobs by name."""
        items = self.custom_objects().list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)[
            "items"
        ]
        return {job["metadata"]["name"]: job for job in items}

    def phase(self, app_handle: str) -> str:
        """The Volcano phase of the job of ``kubernetes://torchx/<ns>:<name>`` ('' before any)."""
        namespace, name = app_handle.rsplit("/", 1)[1].split(":")
        job = self.custom_objects().get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
        return str(((job.get("status") or {}).get("state") or {}).get("phase") or "")

    def evict(self, namespace: str, pod: str) -> None:
        """Evict ``pod`` through the API's eviction subresource, as ``kubectl drain`` does."""
        from kubernetes import client, config

        api = client.CoreV1Api(config.new_client_from_config(str(self.kubeconfig)))
        body = {"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": pod}}
        api.api_client.call_api(
            f"/api/v1/namespaces/{namespace}/pods/{pod}/eviction", "POST", body=body,
            auth_settings=["BearerToken"], response_type="object",
        )  # fmt: skip


@contextlib.contextmanager
def private_cluster() -> Iterator[PrivateCluster]:
    """A private cluster up for the ``with`` block, stopped and removed after."""
    cluster = PrivateCluster()
    try:
        cluster.script("up")
        yield cluster
    finally:
        with contextlib.suppress(Exception):
            cluster.script("down", timeout=120)
        shutil.rmtree(cluster.state, ignore_errors=True)
