"""``SchedulerSupport``: the interface, and the default that asks TorchX's ``Runner`` app by app."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

    from torchx.runner import Runner
    from torchx.specs import AppDryRunInfo, AppStatus


#: ``SchedulerCredentials.kubeconfig`` meaning the pod's own service account, not a kubeconfig file
IN_CLUSTER = "in-cluster"


@dataclass(frozen=True)
class SchedulerCredentials:
    """What a connection says about reaching a scheduler's API beside its run options: ``host`` (the
    API's address, such as a Kubernetes API server's URL) and ``token`` (a bearer token, kept out of
    ``repr``; the hook masks it before anything can print it), ``kubeconfig`` (a Kubernetes client's
    kubeconfig file, or ``in-cluster``). All optional."""

    host: str | None = None
    token: str | None = field(default=None, repr=False)
    kubeconfig: str | None = None


class SchedulerSupport:
    """What the provider needs from one TorchX scheduler, beyond submitting an app.

    The default works for every scheduler through TorchX's own per-app calls (``Runner.status``,
    ``Runner.log_lines``); a scheduler module overrides what it can do better.

    :param name: the scheduler's name (``slurm``, ``kubernetes``...).
    :param runner: the TorchX runner of the hook that asks.
    :param cfg: gives the hook's run options for the scheduler (a Kubernetes namespace, say) to calls
        that are not given a dry run (``find_submission`` of a try that starts again); called only
        when one needs them, since reading them may fetch the hook's connection.
    :param credentials: gives the connection's ``SchedulerCredentials`` (called when needed).
    """

    #: Whether apps live on without the process that launched them: what lets another task, the
    #: triggerer or a retry wait on them. Local schedulers keep their apps' state in the launcher.
    apps_outlive_launcher: bool = True
    #: Whether a job starts with the environment of the process that submits it (local_cwd, slurm).
    #: For those the hook submits with a cleaned environment (``torchx_airflow.schedulers.env``).
    inherits_launcher_env: bool = False
    #: Launcher variables (``fnmatch`` patterns) the scheduler's own client needs when submitting.
    launcher_env_patterns: tuple[str, ...] = ()
    #: Whether a submission marked with ``stamp`` can be found again with ``find_submission``: what
    #: lets a retry reattach to a job whose submitter died before it could record the handle.
    finds_submissions: bool = False
    #: Whether ``usage`` reads what an app used from the scheduler's own accounting; without it the
    #: task counts the requested resources x the time from submission to the end.
    accounts_usage: bool = False

    def __init__(
        self,
        name: str,
        runner: Runner,
        cfg: Callable[[], Mapping[str, Any]] | None = None,
        credentials: Callable[[], SchedulerCredentials] | None = None,
    ) -> None:
        self.name = name
        self.runner = runner
        self._cfg = cfg
        self._credentials = credentials

    @property
    def credentials(self) -> SchedulerCredentials:
        """The connection's host and token (none without a hook's)."""
        return self._credentials() if self._credentials is not None else SchedulerCredentials()

    @property
    def cfg(self) -> dict[str, Any]:
        """The hook's run options (``{}`` without a hook's)."""
        return dict(self._cfg()) if self._cfg is not None else {}

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"

    def handle(self, app_id: str) -> str:
        """The app handle ``scheduler://session/app_id`` of ``app_id`` in the runner's session."""
        return f"{self.name}://{self.runner.name()}/{app_id}"

    def statuses(self, app_ids: Sequence[str]) -> dict[str, AppStatus | None]:
        """Status of every app: ``None`` for an app the scheduler does not know.

        An app missing from the answer was not answered (try again); a failure of the whole query
        raises. The default asks ``Runner.status`` once per app: an app whose own query fails (a 403
        on one Kubernetes namespace) is left unanswered, so its error never reaches the others (asked
        alone, it raises its own error); only when every app's query fails does the call raise.
        """
        answer: dict[str, AppStatus | None] = {}
        first_error: Exception | None = None
        for app_id in dict.fromkeys(app_ids):
            try:
                answer[app_id] = self.runner.status(self.handle(app_id))
            except Exception as e:
                first_error = first_error or e
        if first_error is not None and not answer:
            raise first_error
        return answer

    def status(self, app_id: str) -> AppStatus | None:
        """Status of one app (``statuses`` of one); raises ``LookupError`` when it went unanswered."""
        answer = self.statuses([app_id])
        if app_id not in answer:
            raise LookupError(f"Scheduler {self.name!r} gave no status for app {app_id!r}; asking again.")
        return answer[app_id]

    def cancel(self, app_id: str) -> None:
        """Cancel a running app: TorchX's own cancel unless the scheduler's module knows better."""
        self.runner.cancel(self.handle(app_id))

    def log_streams(self) -> tuple[str | None, ...]:
        """The log streams of each replica: ``(None,)`` when the scheduler combines them."""
        return (None,)

    def follows_files(self, app_id: str) -> bool:
        """Whether the app's logs are files this process reads itself (``log_file``); otherwise they
        are read through ``Runner.log_lines``."""
        return False

    def log_lines(
        self,
        app_handle: str,
        role: str,
        k: int,
        should_tail: bool,
        until: threading.Event | None,
        poll: float,
    ) -> Iterable[str]:
        """Log lines of replica ``k`` of ``role`` where they are not files this process reads
        (``follows_files`` False): TorchX's ``Runner.log_lines``. A scheduler whose replica log exists
        only once the replica started (a Kubernetes pod) waits for it here, every ``poll`` seconds,
        and stops waiting when ``until`` is set."""
        return self.runner.log_lines(app_handle, role, k=k, should_tail=should_tail)

    def log_file(self, app_id: str, role: str, k: int, stream: str | None, ask: bool = True) -> str | None:
        """The file a replica's log stream is written to; None while it cannot be told.

        ``ask=False`` answers from what earlier queries learnt, without asking the scheduler: log
        readers that follow a wait use it, so the wait's own status polls stay the only queries.
        """
        return None

    def separate_secrets(self, dryrun_info: AppDryRunInfo, names: Iterable[str]) -> dict[str, str]:
        """Take the env variables ``names`` out of the scheduler request; return them.

        Schedulers that write the request down where others can read it (Slurm's batch script) move
        secrets to the submitting process's environment instead. The default leaves the request as it
        is: the role env goes to the job only (Kubernetes, AWS Batch, Docker) or straight into the
        job's process (local_cwd).
        """
        return {}

    def check_dryrun(self, dryrun_info: AppDryRunInfo) -> None:
        """What the scheduler would refuse of the request, found at the dry run with no call to the
        scheduler (``TorchXConfigError`` naming the fix): a dry run that passes is a request the
        scheduler takes. The default finds nothing."""

    def check_request(self, dryrun_info: AppDryRunInfo) -> None:
        """Last marks and checks on the request just before it is submitted (every submission, with
        or without ``stamp``): raise ``TorchXConfigError`` naming the fix when the scheduler cannot
        take it, so that nothing is left half-submitted. The default does nothing."""

    def stamp(self, dryrun_info: AppDryRunInfo, token: str) -> None:
        """Mark the request with ``token`` so ``find_submission(token)`` finds its job (when
        ``finds_submissions``); the default leaves it as it is."""

    def find_submission(self, token: str, since: float) -> str | None:
        """The app id of the job submitted with ``stamp(..., token)`` at or after ``since`` (epoch
        seconds); None when the scheduler has no such job. Raises when it cannot tell."""
        return None

    def infrastructure_reason(self, state: str, msg: str) -> str | None:
        """Why an app that ended in ``state`` (an ``AppState`` name) with status ``msg`` ended for the
        infrastructure's reasons (a node failure, a preemption), or None when it ended for its own
        (an exit code, memory, a time limit) or this cannot be told: what makes the operator resubmit
        it without using the task's retries (``policies.resubmission``). The default tells none.
        """
        return None

    def leave_resubmission_to_task(self, dryrun_info: AppDryRunInfo) -> None:
        """Keep the scheduler from restarting the job itself after an infrastructure end, so that it
        ends and the task resubmits it with what resumes it (``torchx_airflow.policies.resubmission``). The
        default leaves the request as it is."""

    def image_digest(self, image: str) -> str | None:
        """The content digest of ``image`` where the scheduler can tell it (a registry's
        ``sha256:...``), for cache keys; None when it cannot: the key then holds the image's name
        only, and a tag that moves (``:latest``) is not noticed. The default tells none."""
        return None

    def remember_submission(self, app_id: str, dryrun_info: AppDryRunInfo) -> None:
        """Called after ``dryrun_info`` was submitted as ``app_id``: remember what later calls need."""

    def usage(self, app_id: str) -> dict[str, Any] | None:
        """What the ended app used, from the scheduler's own accounting: a JSON-safe dict with
        ``source`` (``"sacct"``, ``"process"``...), ``elapsed_s`` and ``cpu_time_s``, and ``totals``
        (``cpu_hours``, ``gpu_hours`` by GPU type, ``mem_gb_hours``) when the scheduler allocates
        resources itself; None when it keeps no such accounting (``policies.cost.usage`` then counts
        the requested resources x elapsed). Raises when the accounting cannot be read.
        """
        return None


def environ_subset(environ: Mapping[str, str], patterns: Iterable[str]) -> dict[str, str]:
    """The variables of ``environ`` whose names match one of ``patterns`` (``fnmatch``, case-sensitive)."""
    from fnmatch import fnmatchcase

    patterns = tuple(patterns)
    return {name: value for name, value in environ.items() if any(fnmatchcase(name, p) for p in patterns)}
