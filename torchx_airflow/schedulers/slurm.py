"""Slurm: every app's status from one ``sacct`` query, every Slurm state mapped, logs by work dir,
secrets through the ``sbatch`` process environment instead of the batch script.

TorchX 0.7's own Slurm status asks ``sacct`` once per app and fails with "failed to translate slurm
state CANCELLED by 0" on a job cancelled with ``scancel``. Here ``statuses`` asks
``sacct -j id1,...,idN`` once for all apps, and ``squeue`` only for the ids accounting does not
have yet (a job submitted a moment ago); every Slurm state maps to a TorchX ``AppState``, and the
Slurm state itself is the status's ``msg``.

Sites as they are configured in the wild:

- No accounting (no ``slurmdbd``, ``AccountingStorageType`` unset, which ``scontrol show config``
  tells): status comes from ``squeue`` alone, which knows jobs that are queued, running, or ended
  within ``MinJobAge`` (300 s by default); a job older than that is gone from Slurm altogether.
- Accounting down (``slurmdbd`` restarting): ``squeue`` answers for the jobs ``slurmctld`` still
  has; an app neither can answer for is left unanswered (asked again), never reported unknown.
- Job comments not kept in accounting (``AccountingStoreFlags`` without ``job_comment``, Slurm's
  default): a job that left ``squeue`` cannot be found by its submission mark, so
  ``find_submission`` refuses to guess and says what to configure.

Job ids are ASCII digits, checked before any command runs: ``"١٢٣".isdigit()`` is True, and one
such id in ``sacct -j`` fails the whole query.
"""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.schedulers.base import SchedulerSupport
from torchx_airflow.schedulers.parsed_statuses import ParsedStatuses
from torchx_airflow.schedulers.slurm_fields import new_delimiter, split_records, squeue_format

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


#: Slurm job states that end a job for the cluster's reasons, not the job's: its node failed (or
#: did not boot), or a job of a higher-priority partition preempted it.
INFRASTRUCTURE_STATES = ("NODE_FAIL", "PREEMPTED", "BOOT_FAIL")


def infrastructure_states(msg: str) -> list[str]:
    """The infrastructure states among the Slurm states of an ``app_status`` message.

    >>> infrastructure_states("CANCELLED by 0, NODE_FAIL (exit code 0:0)")
    ['NODE_FAIL']
    """
    states = msg.split(" (exit code", 1)[0].split(", ")
    return [s for s in INFRASTRUCTURE_STATES if any(w.split(" ")[0].rstrip("+") == s for w in states)]


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


# Slurm's job ids are 32-bit; squeue refuses a larger one ("Invalid job id: ...") for the whole query
_MAX_JOB_ID = 0xFFFFFFFD


def is_job_id(app_id: str) -> bool:
    """Whether ``app_id`` can be a Slurm job id: ASCII digits only (``str.isdigit`` takes ``١٢٣``),
    within Slurm's 32-bit range."""
    return app_id.isascii() and app_id.isdigit() and 0 < int(app_id) <= _MAX_JOB_ID


@dataclass(frozen=True)
class SlurmAccounting:
    """What ``scontrol show config`` says about accounting."""

    storage_type: str
    store_flags: tuple[str, ...]

    @property
    def enabled(self) -> bool:
        """Whether jobs go to accounting at all (``sacct`` answers)."""
        return self.storage_type not in ("", "(null)", "accounting_storage/none")

    @property
    def keeps_comments(self) -> bool:
        """Whether accounting keeps job comments (what finds a job by its mark once it left squeue)."""
        return self.enabled and "job_comment" in self.store_flags


def slurm_accounting() -> SlurmAccounting:
    """Accounting as slurmctld is configured; raises when ``scontrol`` cannot answer."""
    proc = _run(["scontrol", "show", "config"])
    if proc.returncode != 0:
        raise RuntimeError(
            f"scontrol show config failed (exit code {proc.returncode}): {proc.stderr.strip()}"
        )
    settings: dict[str, str] = {}
    for line in proc.stdout.splitlines():
        name, sep, value = line.partition("=")
        if sep:
            settings[name.strip()] = value.strip()
    flags = settings.get("AccountingStoreFlags", "")
    return SlurmAccounting(
        settings.get("AccountingStorageType", ""),
        tuple(f.strip() for f in flags.split(",") if f.strip() and f.strip() != "(null)"),
    )


def _run(cmd: Sequence[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(cmd), capture_output=True, text=True, timeout=COMMAND_TIMEOUT)


def _app_id_of(job_id: str) -> str:
    """``1234`` for ``1234``, ``1234+1`` (a heterogeneous component) and ``1234.batch``."""
    return job_id.split("+", 1)[0].split(".", 1)[0].split("_", 1)[0]


#: One allocation as printed: (JobID, State, ExitCode, WorkDir, JobName); squeue prints no exit code.
JobRecord = tuple[str, str, str, str, str]


def job_row(record: JobRecord) -> SlurmJobRow:
    """The row of one printed allocation."""
    job_id, state, exit_code, workdir, name = record
    return SlurmJobRow(_app_id_of(job_id), name, state, exit_code, workdir)


def sacct_records(app_ids: Sequence[str]) -> list[JobRecord]:
    """Every allocation of ``app_ids`` in Slurm's accounting, as printed, in one ``sacct`` call.

    The job name comes last, between delimiters drawn for this query (``schedulers.slurm_fields``):
    a job that renames itself cannot move its state or exit code.
    """
    delimiter = new_delimiter()
    fields = "JobID,State,ExitCode,WorkDir,JobName"
    proc = _run(
        ["sacct", "-p", f"--delimiter={delimiter}", "-n", "-X", "-j", ",".join(app_ids), "-o", fields]
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    return [
        (job_id, state, exit_code, workdir, name)
        for job_id, state, exit_code, workdir, name in split_records(proc.stdout, delimiter, 5)
        if "." not in job_id
    ]


def squeue_records(app_ids: Sequence[str]) -> list[JobRecord] | None:
    """The jobs slurmctld has (queued, running or just ended), as printed, in one ``squeue`` call.

    ``[]`` when slurmctld knows none of them; ``None`` when squeue could not answer.
    """
    delimiter = new_delimiter()
    fmt = squeue_format(["%i", "%T", "%Z", "%j"], delimiter)
    proc = _run(["squeue", "-h", "--states=all", "-j", ",".join(app_ids), "-o", fmt])
    if proc.returncode != 0:
        # only "none of them": a malformed id ("Invalid job id: 1x") must not read as that
        return [] if "Invalid job id specified" in proc.stderr else None
    return [
        (job_id, state, "", workdir, name)
        for job_id, state, workdir, name in split_records(proc.stdout, delimiter, 4)
    ]


def _app_status_of(records: tuple[JobRecord, ...]) -> AppStatus:
    return app_status([job_row(record) for record in records])


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


def _job_with_mark(records: Iterable[Sequence[str]], mark: str) -> str | None:
    """The app id of the first ``(JobID, Comment)`` record whose comment holds ``mark``."""
    for job_id, comment in records:
        if mark in comment.split():
            return _app_id_of(job_id)
    return None


def squeue_marked(mark: str, user: str) -> str | None:
    """The app id of ``user``'s job whose comment holds ``mark`` in ``squeue`` (queued, running, or
    ended within ``MinJobAge``; hidden partitions too); raises when squeue cannot answer."""
    delimiter = new_delimiter()
    fmt = squeue_format(["%i", "%k"], delimiter)
    proc = _run(["squeue", "-h", "--all", "--states=all", "-u", user, "-o", fmt])
    if proc.returncode != 0:
        raise RuntimeError(f"squeue failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    return _job_with_mark(split_records(proc.stdout, delimiter, 2), mark)


# How far before the recorded submission time accounting is searched: clocks of the worker and of
# Slurm may differ, and the mark is unique, so a wide window costs nothing but a longer listing.
SACCT_MARGIN_SECONDS = 3600

#: Every job state sacct knows. A time window without states (``-S`` alone) leaves out the jobs whose
#: eligible time accounting never recorded ("Unknown": a job cancelled while held or pending, and
#: now and then one that ran and failed); with states, a job is in the window when it was in one of
#: them then, whatever its eligible time.
SACCT_EVERY_STATE = "BF,CA,CD,DL,F,NF,OOM,PD,PR,R,RQ,RS,RV,S,TO"


def sacct_window(start: str) -> list[str]:
    """``sacct`` options for every job in any state between ``start`` (sacct's local time) and now."""
    return ["-S", start, "-E", "now", "-s", SACCT_EVERY_STATE]


def sacct_marked(mark: str, user: str, since: float) -> str | None:
    """The same in accounting, among ``user``'s jobs since ``since`` (epoch seconds); comments are
    there where ``AccountingStoreFlags=job_comment``. Raises when sacct cannot answer."""
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - SACCT_MARGIN_SECONDS))
    delimiter = new_delimiter()
    window = sacct_window(start)
    proc = _run(
        ["sacct", "-X", "-n", "-p", f"--delimiter={delimiter}", "-u", user, *window, "-o", "JobID,Comment"]
    )
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    return _job_with_mark(split_records(proc.stdout, delimiter, 2), mark)


_UNTRUSTED_LOOKUP = (
    "An earlier try died while submitting its Slurm job, and that job cannot be looked up: it is not in "
    "squeue, and this cluster's accounting keeps no job comments (AccountingStorageType={storage}, "
    "AccountingStoreFlags without job_comment), where the job's submission mark is. Submitting again "
    "could run the job twice, so nothing was submitted. To fix this, add AccountingStoreFlags=job_comment "
    "to slurm.conf (with slurmdbd accounting) and run `scontrol reconfigure`; or, if that job is known "
    "not to exist or to be done with, delete the task's state-store key 'torchx_submission' and clear "
    "the task."
)


class SlurmSupport(SchedulerSupport):
    """Slurm through its command-line clients (``sacct``, ``squeue``, ``scontrol``)."""

    inherits_launcher_env = True
    # sbatch's own configuration and input variables
    launcher_env_patterns = ("SLURM_*", "SBATCH_*")
    finds_submissions = True
    accounts_usage = True

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
        process's uid, the one ``sbatch`` submitted as. Raises when either cannot answer, and
        ``TorchXConfigError`` when the job is not in ``squeue`` and accounting keeps no comments:
        "not found" could then be a job that already ended, and submitting again would duplicate it.
        """
        mark, user = submission_mark(token), str(os.getuid())
        found = squeue_marked(mark, user)
        if found is not None:
            return found
        accounting = self._accounting(refresh=True)
        if not accounting.keeps_comments:
            raise TorchXConfigError(_UNTRUSTED_LOOKUP.format(storage=accounting.storage_type or "(unset)"))
        return sacct_marked(mark, user, since)

    def __init__(self, name: str, runner: Runner, *args: Any, **kwargs: Any) -> None:
        super().__init__(name, runner, *args, **kwargs)
        self._workdirs: dict[str, str] = {}
        self._accounting_config: SlurmAccounting | None = None
        # a job whose records did not change since the last query is not parsed again
        self.parsed_statuses: ParsedStatuses[tuple[JobRecord, ...], AppStatus] = ParsedStatuses(
            _app_status_of
        )

    def _accounting(self, refresh: bool = False) -> SlurmAccounting:
        """The cluster's accounting settings, asked once per hook (raises while scontrol cannot answer)."""
        if refresh or self._accounting_config is None:
            self._accounting_config = slurm_accounting()
        return self._accounting_config

    def _accounting_enabled(self) -> bool:
        """Whether accounting is configured; while ``scontrol`` cannot tell, assume it is."""
        try:
            return self._accounting().enabled
        except (RuntimeError, OSError, subprocess.SubprocessError):
            return True

    def _accounting_records(
        self, job_ids: Sequence[str]
    ) -> tuple[dict[str, tuple[JobRecord, ...]], Exception | None]:
        """``sacct``'s records by app, and the error of a ``sacct`` that failed on a cluster with accounting.

        ``scontrol show config`` is asked only once ``sacct`` failed: a cluster without accounting
        is remembered and never asked ``sacct`` again; a healthy one never runs ``scontrol``.
        """
        if self._accounting_config is not None and not self._accounting_config.enabled:
            return {}, None
        try:
            return self._by_app(sacct_records(job_ids)), None
        except (RuntimeError, OSError, subprocess.SubprocessError) as e:
            return {}, (e if self._accounting_enabled() else None)

    def statuses(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """One ``sacct`` for all apps; one ``squeue`` for those accounting does not have (yet).

        An id that is no Slurm job id is unknown (``None``) without a command. Without accounting,
        or while ``sacct`` fails, ``squeue`` answers for the jobs slurmctld has; the others are
        unknown only when both sources answered without them.
        """
        ids = list(dict.fromkeys(app_ids))
        answer: dict[str, AppStatus | None] = {i: None for i in ids if not is_job_id(i)}
        job_ids = [i for i in ids if is_job_id(i)]
        if not job_ids:
            return answer
        found, accounting_error = self._accounting_records(job_ids)
        missing = [i for i in job_ids if i not in found]
        if missing:
            queued = squeue_records(missing)
            if queued is None and accounting_error is not None:
                raise accounting_error  # neither source answers: the whole query failed
            if queued is None:  # squeue failed: those apps are not answered this time
                missing = []
            else:
                found.update(self._by_app(queued))
        parsed = self.parsed_statuses.statuses(found)
        for app_id in job_ids:
            if app_id in found:
                answer[app_id] = parsed[app_id]
            elif app_id in missing and accounting_error is None:
                answer[app_id] = None  # neither accounting (if any) nor slurmctld has it
        return answer

    def _by_app(self, records: Iterable[JobRecord]) -> dict[str, tuple[JobRecord, ...]]:
        by_app: dict[str, list[JobRecord]] = {}
        for record in records:
            app_id, workdir = _app_id_of(record[0]), record[3]
            by_app.setdefault(app_id, []).append(record)
            if workdir and workdir not in ("(null)", "n/a"):
                self._workdirs[app_id] = workdir
        return {app_id: tuple(app_records) for app_id, app_records in by_app.items()}

    def leave_resubmission_to_task(self, dryrun_info: AppDryRunInfo) -> None:
        """``--no-requeue`` instead of TorchX's ``--requeue``: Slurm would otherwise put a job whose
        node failed or that was preempted back in the queue under the same id, to start over without
        knowing its checkpoint; the job ends (``NODE_FAIL``, ``PREEMPTED``) and the task resubmits
        it with ``TORCHX_AIRFLOW_RESUME_FROM``."""
        request = dryrun_info.request
        if request.max_retries > 0:  # TorchX's batch script requeues the job itself on a failed exit
            log.warning(
                "The app has max_retries=%d: its Slurm job keeps TorchX's --requeue, so Slurm restarts it "
                "under the same id after a node failure (from scratch) and the task resubmits nothing",
                request.max_retries,
            )
            return
        for replica in request.replicas.values():
            replica.sbatch_opts.pop("requeue", None)
            replica.sbatch_opts["no-requeue"] = None

    def infrastructure_reason(self, state: str, msg: str) -> str | None:
        """The Slurm state that ended the app for the cluster's reasons (``NODE_FAIL``,
        ``PREEMPTED``, ``BOOT_FAIL``), when one of its allocations has it. The others' states
        (a peer rank that failed or was cancelled when its node went) follow from it."""
        if state not in ("FAILED", "CANCELLED"):
            return None
        found = infrastructure_states(msg)
        return found[0] if found else None

    def workdir(self, app_id: str, ask: bool = True) -> str | None:
        """Where the job runs (its output files are there): from the last status query, else asked
        (unless ``ask`` is False)."""
        if ask and app_id not in self._workdirs and is_job_id(app_id):
            self._accounting_records([app_id])
            if app_id not in self._workdirs:
                self._by_app(squeue_records([app_id]) or [])
        return self._workdirs.get(app_id)

    def usage(self, app_id: str) -> dict[str, Any] | None:
        """Elapsed time, CPU time, allocated TRES and peak memory of every allocation and step, from
        one ``sacct`` (``schedulers.slurm_usage``); None without accounting or for a job it lacks."""
        if not is_job_id(app_id) or (
            self._accounting_config is not None and not self._accounting_config.enabled
        ):
            return None
        from torchx_airflow.schedulers.slurm_usage import sacct_usage

        try:
            return sacct_usage(app_id, COMMAND_TIMEOUT)
        except (RuntimeError, OSError, subprocess.SubprocessError):
            if self._accounting_enabled():
                raise
            return None  # a cluster without accounting: there is nothing to read

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
        with_comma = {
            name for replica in replicas for name, value in replica.env.items() if "," in str(value)
        }
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
