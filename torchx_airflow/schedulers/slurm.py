"""Slurm: every app's status from one ``sacct`` query, every Slurm state mapped, logs by work dir,
secrets through the ``sbatch`` process environment instead of the batch script.

TorchX 0.7's own Slurm status asks ``sacct`` once per app and fails with "failed to translate slurm
state CANCELLED by 0" on a job cancelled with ``scancel``. Here ``statuses`` asks
``sacct -j id1,...,idN`` once for all apps, and ``squeue`` only for the ids accounting does not
have yet (a job submitted a moment ago); every Slurm state maps to a TorchX ``AppState``, and the
Slurm state itself is the status's ``msg``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.schedulers.base import SchedulerSupport

if TYPE_CHECKING:
    from torchx.runner import Runner
    from torchx.specs import AppDryRunInfo, AppStatus

log = logging.getLogger(__name__)

COMMAND_TIMEOUT = 60
# Slurm's job states (sacct's and squeue's) -> TorchX AppState names. The first word counts:
# "CANCELLED by 1000" is CANCELLED. Not terminal for TorchX while Slurm may still run the job.
SLURM_STATES: dict[str, str] = {
    "PENDING": "PENDING",
    "CONFIGURING": "PENDING",
    "REQUEUED": "PENDING",
    "REQUEUE_FED": "PENDING",
    "REQUEUE_HOLD": "PENDING",
    "RESV_DEL_HOLD": "PENDING",
    "SPECIAL_EXIT": "PENDING",
    "RESIZING": "PENDING",
    "SUSPENDED": "PENDING",
    "STOPPED": "PENDING",
    "RUNNING": "RUNNING",
    "COMPLETING": "RUNNING",
    "SIGNALING": "RUNNING",
    "STAGE_OUT": "RUNNING",
    "COMPLETED": "SUCCEEDED",
    "CANCELLED": "CANCELLED",
    "FAILED": "FAILED",
    "BOOT_FAIL": "FAILED",
    "DEADLINE": "FAILED",
    "NODE_FAIL": "FAILED",
    "OUT_OF_MEMORY": "FAILED",
    "PREEMPTED": "FAILED",
    "REVOKED": "FAILED",
    "TIMEOUT": "FAILED",
}
# Which replica state an app takes when its replicas differ: the first present in this order.
_APP_STATE_ORDER = ("FAILED", "CANCELLED", "RUNNING", "PENDING", "UNKNOWN", "SUCCEEDED")


def app_state_name(slurm_state: str) -> str:
    """The TorchX ``AppState`` name of a Slurm state; ``UNKNOWN`` for a state this list lacks.

    >>> app_state_name("CANCELLED by 0")
    'CANCELLED'
    """
    words = slurm_state.split()
    return SLURM_STATES.get(words[0].rstrip("+"), "UNKNOWN") if words else "UNKNOWN"


@dataclass(frozen=True)
class SlurmJobRow:
    """One allocation of a job (a heterogeneous job has one per replica): what sacct/squeue said."""

    app_id: str
    name: str
    state: str
    exit_code: str = ""
    workdir: str = ""


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=COMMAND_TIMEOUT)


def _app_id_of(job_id: str) -> str:
    """``1234`` for ``1234``, ``1234+1`` (a heterogeneous component) and ``1234.batch``."""
    return job_id.split("+", 1)[0].split(".", 1)[0].split("_", 1)[0]


def sacct_rows(app_ids: Sequence[str]) -> list[SlurmJobRow]:
    """Every allocation of ``app_ids`` in Slurm's accounting, in one ``sacct`` call."""
    proc = _run(
        ["sacct", "-P", "-n", "-X", "-j", ",".join(app_ids), "-o", "JobID,JobName,State,ExitCode,WorkDir"]
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 5 and "." not in parts[0]:
            rows.append(SlurmJobRow(_app_id_of(parts[0]), parts[1], parts[2], parts[3], "|".join(parts[4:])))
    return rows


def squeue_rows(app_ids: Sequence[str]) -> list[SlurmJobRow] | None:
    """The jobs slurmctld has (queued, running or just ended), in one ``squeue`` call.

    ``[]`` when slurmctld knows none of them; ``None`` when squeue could not answer.
    """
    proc = _run(["squeue", "-h", "--states=all", "-j", ",".join(app_ids), "-o", "%i|%j|%T|%Z"])
    if proc.returncode != 0:
        return [] if "Invalid job id" in proc.stderr else None
    rows = []
    for line in proc.stdout.splitlines():
        parts = line.split("|")
        if len(parts) >= 4:
            rows.append(SlurmJobRow(_app_id_of(parts[0]), parts[1], parts[2], workdir="|".join(parts[3:])))
    return rows


def app_status(rows: Sequence[SlurmJobRow]) -> AppStatus:
    """The ``AppStatus`` of one app from its allocations; ``msg`` is Slurm's own state."""
    from torchx.specs import AppState, AppStatus, ReplicaStatus, RoleStatus

    roles: dict[str, RoleStatus] = {}
    states = []
    for row in rows:
        state = app_state_name(row.state)
        states.append(state)
        role, _, replica = row.name.rpartition("-")
        if role and replica.isdigit():
            roles.setdefault(role, RoleStatus(role, []))
            roles[role].replicas.append(
                ReplicaStatus(id=int(replica), role=role, state=AppState[state], hostname="")
            )
    app_state = next(s for s in _APP_STATE_ORDER if s in states)
    slurm_states = sorted({row.state for row in rows})
    msg = ", ".join(slurm_states)
    failed_codes = sorted({row.exit_code for row in rows if row.exit_code not in ("", "0:0")})
    if failed_codes:
        msg += f" (exit code {', '.join(failed_codes)})"
    return AppStatus(AppState[app_state], msg=msg, roles=list(roles.values()))


def submission_mark(token: str) -> str:
    """The word a stamped job carries in its Slurm comment."""
    return f"torchx-airflow-submission:{token}"


def _job_with_mark(lines: Iterable[str], mark: str) -> str | None:
    """The app id of the first ``JobID|Comment`` line whose comment holds ``mark``."""
    for line in lines:
        job_id, _, comment = line.partition("|")
        if mark in comment.split():
            return _app_id_of(job_id.strip())
    return None


def squeue_marked(mark: str, user: str) -> str | None:
    """The app id of ``user``'s job whose comment holds ``mark`` in ``squeue`` (queued, running, or
    ended within ``MinJobAge``; hidden partitions too); raises when squeue cannot answer."""
    proc = _run(["squeue", "-h", "--all", "--states=all", "-u", user, "-o", "%i|%k"])
    if proc.returncode != 0:
        raise RuntimeError(f"squeue failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    return _job_with_mark(proc.stdout.splitlines(), mark)


# How far before the recorded submission time accounting is searched: clocks of the worker and of
# Slurm may differ, and the mark is unique, so a wide window costs nothing but a longer listing.
SACCT_MARGIN_SECONDS = 3600


def sacct_marked(mark: str, user: str, since: float) -> str | None:
    """The same in accounting, among ``user``'s jobs since ``since`` (epoch seconds); comments are
    there where ``AccountingStoreFlags=job_comment``. Raises when sacct cannot answer."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - SACCT_MARGIN_SECONDS))
    proc = _run(["sacct", "-X", "-n", "-P", "-u", user, "-S", start, "-o", "JobID,Comment"])
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    return _job_with_mark(proc.stdout.splitlines(), mark)


class SlurmSupport(SchedulerSupport):
    """Slurm through its command-line clients (``sacct``, ``squeue``, ``scontrol``)."""

    inherits_launcher_env = True
    # sbatch's own configuration and input variables
    launcher_env_patterns = ("SLURM_*", "SBATCH_*")
    finds_submissions = True

    def stamp(self, dryrun_info: AppDryRunInfo, token: str) -> None:
        """Add the submission mark to the job's ``--comment`` (after the cfg's own comment, if any)."""
        cmd: list[str] = dryrun_info.request.cmd
        mark = submission_mark(token)
        for i, arg in enumerate(cmd):
            if arg.startswith("--comment="):
                cmd[i] = f"{arg} {mark}"
                return
        cmd.append(f"--comment={mark}")

    def find_submission(self, token: str, since: float) -> str | None:
        """The stamped job: in ``squeue`` (queued, running, or ended within ``MinJobAge``), else in
        ``sacct`` (which has comments where ``AccountingStoreFlags=job_comment``). Jobs of this
        process's uid, the one ``sbatch`` submitted as. Raises when either cannot answer."""
        mark, user = submission_mark(token), str(os.getuid())
        return squeue_marked(mark, user) or sacct_marked(mark, user, since)

    def __init__(self, name: str, runner: Runner) -> None:
        super().__init__(name, runner)
        self._workdirs: dict[str, str] = {}

    def statuses(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """One ``sacct`` for all apps; one ``squeue`` for those accounting does not have yet."""
        ids = list(dict.fromkeys(app_ids))
        answer: dict[str, AppStatus | None] = {i: None for i in ids if not i.isdigit()}
        numeric = [i for i in ids if i.isdigit()]
        if not numeric:
            return answer
        found = self._by_app(sacct_rows(numeric))
        missing = [i for i in numeric if i not in found]
        if missing:
            queued = squeue_rows(missing)
            if queued is None:  # squeue failed: those apps are not answered this time
                missing = []
            else:
                found.update(self._by_app(queued))
        for app_id in numeric:
            if app_id in found:
                answer[app_id] = app_status(found[app_id])
            elif app_id in missing:
                answer[app_id] = None  # neither accounting nor slurmctld has it
        return answer

    def _by_app(self, rows: Iterable[SlurmJobRow]) -> dict[str, list[SlurmJobRow]]:
        by_app: dict[str, list[SlurmJobRow]] = {}
        for row in rows:
            by_app.setdefault(row.app_id, []).append(row)
            if row.workdir and row.workdir not in ("(null)", "n/a"):
                self._workdirs[row.app_id] = row.workdir
        return by_app

    def workdir(self, app_id: str, ask: bool = True) -> str | None:
        """Where the job runs (its output files are there): from the last status query, else asked
        (unless ``ask`` is False)."""
        if ask and app_id not in self._workdirs and app_id.isdigit():
            self._by_app(sacct_rows([app_id]))
            if app_id not in self._workdirs:
                self._by_app(squeue_rows([app_id]) or [])
        return self._workdirs.get(app_id)

    def log_streams(self) -> tuple[str | None, ...]:
        return ("stdout", "stderr")

    def follows_files(self, app_id: str) -> bool:
        return True

    def log_file(self, app_id: str, role: str, k: int, stream: str | None, ask: bool = True) -> str | None:
        """``<work dir>/slurm-<id>-<role>-<k>.out`` (``.err`` for stderr), as TorchX names them."""
        workdir = self.workdir(app_id, ask)
        if workdir is None:
            return None
        return os.path.join(workdir, f"slurm-{app_id}-{role}-{k}.{'err' if stream == 'stderr' else 'out'}")

    def separate_secrets(self, dryrun_info: AppDryRunInfo, names: Iterable[str]) -> dict[str, str]:
        """Secrets leave ``srun --export=...`` in the batch script (stored by slurmctld, traced by its
        ``set -x`` into the job's output): they travel in ``sbatch``'s environment, which Slurm
        exports to the job, and ``srun --export=ALL,...`` passes on to every task.

        Values holding a ``,`` travel the same way: ``srun --export=ALL,K=V,...`` splits its list at
        every comma, so ``K=a,LD_PRELOAD=/tmp/x.so`` (a value from ``dag_run.conf``, say) would set
        ``LD_PRELOAD`` for every task. Rerouted rather than refused, since a comma is an ordinary
        character in such values (``NCCL_SOCKET_IFNAME=eth0,eth1``, JSON).
        """
        replicas = list(getattr(dryrun_info.request, "replicas", {}).values())
        with_comma = {name for replica in replicas for name, value in replica.env.items() if "," in str(value)}
        names = set(names) | with_comma
        moved: dict[str, str] = {}
        for replica in replicas:
            for name in sorted(names & set(replica.env)):
                value = replica.env.pop(name)
                if moved.setdefault(name, value) != value:
                    what = "values holding ','" if name in with_comma else "secret values"
                    raise TorchXConfigError(
                        f"Env variable {name!r} holds different {what} in different roles; Slurm passes "
                        "those to the whole job through sbatch's environment (srun's --export list would "
                        "split a value at ','). Give it one value, or different names per role."
                    )
        return moved
