"""A private Slurm cluster for the tests that stop its daemons or need another configuration.

The shared cluster (``scripts/slurm/cluster.sh up``) serves every test running in parallel; stopping
``slurmctld`` there, or running it without accounting, would disturb them all. A private cluster is
started beside it by the same script (``up --private``): its own ``slurm.conf`` (``SLURM_CONF``),
state directory, pid files and ports, the same munge and MariaDB (its own database). Its daemons
are stopped by their pid files, never by name. Starting one takes about 5 s.

``multinode=True`` adds the two compute nodes in network namespaces and their partitions ``multi``
and ``urgent`` (scripts/slurm/nodes.sh), with namespaces, a subnet and an uplink of its own: the
tests that set a node down or preempt a job do it there, never on the shared cluster's nodes.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.slurm.conftest import CLUSTER


def _free_ports(count: int) -> list[int]:
    with contextlib.ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in sockets]


class PrivateSlurm:
    """One private cluster: ``env`` points Slurm's commands (and TorchX's) at it.

    :param accounting: ``full`` (slurmdbd, job comments kept), ``no_job_comment`` (slurmdbd as Slurm's
        default keeps it) or ``none`` (no slurmdbd: no ``sacct``).
    :param multinode: also the namespace nodes ``nodes`` (``<name>-n1``, ``<name>-n2``) in the
        partitions ``multi`` (preemptible) and ``urgent``.
    :param gpus: ``TYPE:COUNT`` GPUs on the node, as a GRES (``cluster.sh --gpus``); none by default.
    """

    def __init__(self, accounting: str = "full", multinode: bool = False, gpus: str = "") -> None:
        # short: slurmd's unix sockets live under the state directory (108-byte path limit)
        self.state = Path(tempfile.mkdtemp(prefix="txslurm-", dir="/tmp"))
        self.name = f"tx{uuid.uuid4().hex[:8]}"
        self.accounting = accounting
        self.multinode = multinode
        self.nodes = [f"{self.name}-n1", f"{self.name}-n2"] if multinode else []
        self.gpus = gpus  # "TYPE:COUNT": the node's GPUs, a GRES (cluster.sh --gpus)
        ctld, slurmd, dbd = _free_ports(3)
        self.env = {
            "SLURM_STATE": str(self.state),
            "SLURMCTLD_PORT": str(ctld),
            "SLURMD_PORT": str(slurmd),
            "SLURMDBD_PORT": str(dbd),
        }
        self.slurm_conf = str(self.state / "etc" / "slurm.conf")

    def _script(self, *args: str, timeout: float = 180) -> str:
        flags = {"full": [], "no_job_comment": ["--no-job-comment"], "none": ["--no-accounting"]}
        cmd = ["bash", str(CLUSTER), args[0], "--private", *flags[self.accounting], "--cluster", self.name]
        if self.multinode:
            cmd.append("--multinode")
        cmd += ["--gpus", self.gpus] if self.gpus else []
        proc = subprocess.run(
            [*cmd, *args[1:]], env={**os.environ, **self.env}, capture_output=True, text=True, timeout=timeout
        )
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout + proc.stderr

    def up(self) -> str:
        """Start it; what the script printed."""
        return self._script("up")

    def stop(self, *daemons: str) -> None:
        """Stop ``daemons`` (``slurmctld``, ``slurmdbd``, ``slurmd``) and wait until they exited."""
        self._script("stop", *daemons)

    def start(self) -> None:
        """Start again whatever was stopped, and wait until it answers."""
        self._script("start")

    def down(self) -> None:
        with contextlib.suppress(Exception):
            self._script("down", timeout=120)
        if self.accounting != "none":  # its accounting database on the shared MariaDB
            subprocess.run(
                ["mysql", "-uroot", "--socket=/run/mysqld/mysqld.sock", "-e",
                 f"DROP DATABASE IF EXISTS slurm_acct_{self.name}"],
                capture_output=True,
                check=False,
            )  # fmt: skip
        shutil.rmtree(self.state, ignore_errors=True)

    def run(self, cmd: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """A Slurm command against this cluster."""
        return subprocess.run(
            list(cmd),
            env={**os.environ, "SLURM_CONF": self.slurm_conf},
            capture_output=True,
            text=True,
            check=check,
        )


@contextlib.contextmanager
def private_slurm(
    accounting: str = "full", multinode: bool = False, gpus: str = ""
) -> Iterator[PrivateSlurm]:
    """A private cluster for the block; stopped (by pid file) and removed after, namespaces included."""
    cluster = PrivateSlurm(accounting, multinode, gpus)
    try:
        cluster.up()
        yield cluster
    finally:
        cluster.down()
