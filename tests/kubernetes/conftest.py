"""The Kubernetes tests' cluster: the one that answers, or one started here by scripts/k8s/cluster.sh
(as root; the first start on a machine builds kube-apiserver) and stopped afterwards.

The cluster is real where it can be (kube-apiserver, etcd, the Volcano CRDs, tokens, RBAC, TorchX's
own client); Volcano's controller and the kubelet are the stand-in tests/kubernetes/standin.py.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
CLUSTER = REPO / "scripts" / "k8s" / "cluster.sh"
STATE = Path(os.environ.get("K8S_STATE", "/var/tmp/torchx-airflow-k8s"))
KUBECONFIG = STATE / "kubeconfig"
CFG = {"namespace": "default", "queue": "test"}
K8S_CONN = json.dumps({"conn_type": "torchx", "extra": {"scheduler": "kubernetes", "cfg": CFG}})


def _cluster_answers() -> bool:
    return subprocess.run(["bash", str(CLUSTER), "status"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def k8s_cluster() -> Iterator[Path]:
    """The kubeconfig of a running test cluster (``KUBECONFIG`` is set for the session)."""
    STATE.parent.mkdir(parents=True, exist_ok=True)
    with open(STATE.parent / ".torchx-airflow-k8s.lock", "w") as lock:  # one start among xdist workers
        fcntl.flock(lock, fcntl.LOCK_EX)
        started = False
        if not _cluster_answers():
            if os.geteuid() != 0:
                pytest.skip("no Kubernetes test cluster answers and starting one needs root (make k8s-up)")
            proc = subprocess.run(
                ["bash", str(CLUSTER), "up"],
                capture_output=True,
                text=True,
                timeout=1800,  # the first start on a machine builds kube-apiserver
                env={**os.environ, "K8S_OWNER_PID": str(os.getpid())},
            )
            assert proc.returncode == 0, f"scripts/k8s/cluster.sh up failed:\n{proc.stdout}\n{proc.stderr}"
            started = True
    saved = os.environ.get("KUBECONFIG")
    os.environ["KUBECONFIG"] = str(KUBECONFIG)
    try:
        yield KUBECONFIG
    finally:
        if saved is None:
            os.environ.pop("KUBECONFIG", None)
        else:
            os.environ["KUBECONFIG"] = saved
        if started:
            subprocess.run(["bash", str(CLUSTER), "down"], capture_output=True, timeout=120)


def k8s_conn(token: str | None = None) -> str:
    """The ``torchx_k8s`` connection, with ``token`` as its password (the API server's bearer token)."""
    conn: dict = {"conn_type": "torchx", "extra": {"scheduler": "kubernetes", "cfg": CFG}}
    if token:
        conn["password"] = token
    return json.dumps(conn)


def token(user: str) -> str:
    """The test cluster's token of ``admin``, ``worker`` or ``nobody``."""
    return (STATE / f"{user}.token").read_text().strip()
