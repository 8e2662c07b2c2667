"""The tests' questions to Slurm's accounting: which jobs there are, in what state.

Every listing goes through ``sacct_window`` (the product's): a time window alone would leave out
jobs whose eligible time accounting never recorded, and a test counting jobs to prove "no duplicate"
would then miss the duplicate.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from torchx_airflow.schedulers.slurm import sacct_window


def sacct(*args: str, slurm_conf: str | None = None) -> list[list[str]]:
    """``sacct -X -n -P ARGS`` (one line per job, no steps), its lines split at ``|``; raises when it fails.

    :param slurm_conf: the cluster to ask (a private one's ``slurm.conf``); None: the shared one.
    """
    env = {**os.environ, "SLURM_CONF": slurm_conf} if slurm_conf else None
    proc = subprocess.run(["sacct", "-X", "-n", "-P", *args], capture_output=True, text=True, env=env)
    assert proc.returncode == 0, f"sacct failed: {proc.stderr}"
    return [line.split("|") for line in proc.stdout.splitlines() if line.strip()]


def jobs_named(
    name: str, since: str, fields: str = "JobID,State", slurm_conf: str | None = None
) -> list[tuple[str, ...]]:
    """``fields`` of every job called ``name`` since ``since`` (sacct's local time), in any state."""
    rows = sacct(*sacct_window(since), "--name", name, "-o", fields, slurm_conf=slurm_conf)
    return [tuple(row) for row in rows]


def job_state(app_handle: str) -> str:
    """The state accounting has for the job of ``app_handle``; empty while it has none."""
    rows = sacct("-j", app_handle.rsplit("/", 1)[1], "-o", "State")
    return rows[0][0] if rows else ""


def jobs_from(workdir: Path, since: str = "now-1days") -> dict[str, str]:
    """Job id -> state of every job submitted from ``workdir`` (a stack's home, where its workers
    run): other jobs on the cluster never count."""
    rows = sacct(*sacct_window(since), "-o", "JobID,State,WorkDir")
    return {job: state for job, state, path in rows if Path(path).resolve() == workdir.resolve()}


def job_records(workdir: Path, fields: Sequence[str], since: str = "now-1days") -> dict[str, dict[str, str]]:
    """Job id -> ``{field: value}`` (sacct's ``fields``, e.g. ``State``, ``Comment``, ``NodeList``) of every
    job submitted from ``workdir``, as ``jobs_from`` selects them."""
    rows = sacct(*sacct_window(since), "-o", ",".join(["JobID", *fields, "WorkDir"]))
    return {
        row[0]: dict(zip(fields, row[1:-1], strict=True))
        for row in rows
        if Path(row[-1]).resolve() == workdir.resolve()
    }
