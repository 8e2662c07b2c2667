"""The Slurm support (torchx_airflow/schedulers/slurm.py): Slurm's states, heterogeneous jobs, secrets kept
out of the batch script, and the submission mark found in squeue and sacct."""

from __future__ import annotations

import os
import subprocess
import time

import pytest

from tests.unit.schedulers.slurm_printed import delimiter_and_count, printed
from torchx_airflow.exceptions import TorchXConfigError
from torchx_airflow.hooks.torchx import TorchXHook
from torchx_airflow.schedulers.slurm import SlurmJobRow, app_state_name, app_status

# Every state sacct or squeue reports (slurm.schedmd.com/squeue.html#SECTION_JOB-STATE-CODES).
SLURM_STATE_TABLE = [
    ("PENDING", "PENDING"),
    ("CONFIGURING", "PENDING"),
    ("REQUEUED", "PENDING"),
    ("REQUEUE_FED", "PENDING"),
    ("REQUEUE_HOLD", "PENDING"),
    ("RESV_DEL_HOLD", "PENDING"),
    ("SPECIAL_EXIT", "PENDING"),
    ("RESIZING", "PENDING"),
    ("SUSPENDED", "PENDING"),
    ("STOPPED", "PENDING"),
    ("RUNNING", "RUNNING"),
    ("COMPLETING", "RUNNING"),
    ("SIGNALING", "RUNNING"),
    ("STAGE_OUT", "RUNNING"),
    ("COMPLETED", "SUCCEEDED"),
    ("CANCELLED", "CANCELLED"),
    ("CANCELLED by 0", "CANCELLED"),
    ("CANCELLED by 1000", "CANCELLED"),
    ("CANCELLED+", "CANCELLED"),
    ("FAILED", "FAILED"),
    ("BOOT_FAIL", "FAILED"),
    ("DEADLINE", "FAILED"),
    ("NODE_FAIL", "FAILED"),
    ("OUT_OF_MEMORY", "FAILED"),
    ("PREEMPTED", "FAILED"),
    ("REVOKED", "FAILED"),
    ("TIMEOUT", "FAILED"),
    ("SOME_FUTURE_STATE", "UNKNOWN"),
    ("", "UNKNOWN"),
]


@pytest.mark.parametrize(("slurm_state", "app_state"), SLURM_STATE_TABLE)
def test_every_slurm_state_maps_to_an_app_state_with_slurms_state_as_message(slurm_state, app_state):
    assert app_state_name(slurm_state) == app_state
    status = app_status([SlurmJobRow("12", "trainer-0", slurm_state)])
    assert status.state.name == app_state
    assert status.msg == slurm_state


def test_a_heterogeneous_job_reports_each_replica_and_the_worst_state():
    status = app_status(
        [
            SlurmJobRow("12", "trainer-0", "COMPLETED", "0:0"),
            SlurmJobRow("12", "trainer-1", "FAILED", "3:0"),
            SlurmJobRow("12", "reader-0", "COMPLETED", "0:0"),
        ]
    )
    assert status.state.name == "FAILED"
    assert status.msg == "COMPLETED, FAILED (exit code 3:0)"
    roles = {r.role: [(x.id, x.state.name) for x in r.replicas] for r in status.roles}
    assert roles == {"trainer": [(0, "SUCCEEDED"), (1, "FAILED")], "reader": [(0, "SUCCEEDED")]}
    assert app_status(
        [SlurmJobRow("1", "a-0", "RUNNING"), SlurmJobRow("1", "a-1", "PENDING")]
    ).state.name == ("RUNNING")


@pytest.mark.parametrize(
    ("replica_states", "app_state"),
    [
        (("FAILED", "CANCELLED"), "FAILED"),  # Slurm cancels the other replicas of a job one failed
        (("CANCELLED by 0", "NODE_FAIL"), "FAILED"),
        (("CANCELLED", "COMPLETED"), "CANCELLED"),
        (("RUNNING", "CANCELLED"), "CANCELLED"),
        (("PENDING", "RUNNING"), "RUNNING"),
        (("COMPLETED", "PENDING"), "PENDING"),
    ],
)
def test_a_failed_multi_replica_job_is_failed_never_a_persons_cancel(replica_states, app_state):
    """The order replica states combine in: a FAILED replica beside the ones Slurm cancelled after it is
    a failure (the task fails with the app's error, and its infrastructure reason is read), not a
    CANCELLED app, which reads as someone's ``scancel``."""
    rows = [SlurmJobRow("7", f"trainer-{i}", s) for i, s in enumerate(replica_states)]
    assert app_status(rows).state.name == app_state
    assert app_status(list(reversed(rows))).state.name == app_state


def test_slurm_request_keeps_secrets_out_of_the_batch_script():
    from torchx_airflow.apps import build_app_from_component

    hook = TorchXHook(scheduler="slurm")
    app = build_app_from_component("utils.sh", ["true"])
    app.roles[0].env.update({"API_TOKEN": "tok-unit-secret-987", "GIVEN": "given-secret-654", "PLAIN": "p1"})
    info = hook.dryrun(app, secret_env_names=["GIVEN"]).info
    script = str(info)
    assert "tok-unit-secret-987" not in script and "given-secret-654" not in script
    assert "PLAIN=p1" in script
    assert app.roles[0].env["API_TOKEN"] == "tok-unit-secret-987"  # the app itself is untouched

    local = TorchXHook(scheduler="local_cwd")
    local_info = local.dryrun(app).info
    assert "tok-unit-secret-987" in repr(local_info.request)  # Popen env: never written to a file
    hook.close()
    local.close()


def test_slurm_refuses_a_secret_with_different_values_per_role():
    from torchx.specs import AppDef, Role

    roles = [
        Role(name=name, image="/tmp", entrypoint="true", env={"API_TOKEN": value})
        for name, value in (("a", "one-secret-1"), ("b", "two-secret-2"))
    ]
    with pytest.raises(TorchXConfigError, match="'API_TOKEN' holds different secret values"):
        TorchXHook(scheduler="slurm").dryrun(AppDef(name="two", roles=roles))


@pytest.mark.parametrize("cfg_comment", [None, "team ml|run 7"])
def test_slurm_stamp_adds_the_submission_mark_to_the_jobs_comment(cfg_comment):
    from torchx_airflow.apps import build_app_from_component
    from torchx_airflow.schedulers.slurm import submission_mark

    hook = TorchXHook(scheduler="slurm")
    cfg = {"comment": cfg_comment} if cfg_comment else {}
    info = hook.dryrun(build_app_from_component("utils.sh", ["true"]), cfg=cfg).info
    hook.support("slurm").stamp(info, "ab12")
    comments = [arg for arg in info.request.cmd if arg.startswith("--comment=")]
    expected = f"{cfg_comment} {submission_mark('ab12')}" if cfg_comment else submission_mark("ab12")
    assert comments == [f"--comment={expected}"]  # one comment: the cfg's, then the mark
    hook.close()


class _SlurmCommands:
    """``_run`` of the Slurm layer answered from a script: {command: (exit code, stdout, stderr)}."""

    def __init__(self, answers: dict[str, tuple[int, str, str]]) -> None:
        self.answers = answers
        self.calls: list[list[str]] = []

    def __call__(self, cmd):
        self.calls.append(list(cmd))
        code, out, err = self.answers[cmd[0]]
        if cmd[0] in ("sacct", "squeue"):  # the test's rows as Slurm prints them for this command
            out = printed(out, *delimiter_and_count(cmd))
        return subprocess.CompletedProcess(cmd, code, out, err)


def _find(monkeypatch, answers, token="ab12"):
    from torchx_airflow.schedulers import slurm

    commands = _SlurmCommands(answers)
    monkeypatch.setattr(slurm, "_run", commands)
    return slurm.SlurmSupport("slurm", runner=None).find_submission(token, since=1_800_000_000.0), commands


def test_slurm_finds_a_marked_job_by_the_whole_mark_only(monkeypatch):
    squeue = (
        "41|torchx-airflow-submission:ab123\n"  # another token that starts with this one
        "42|(null)\n"
        "43+0|team ml|run 7 torchx-airflow-submission:ab12\n"  # a heterogeneous job, | in the comment
        "43+1|team ml|run 7 torchx-airflow-submission:ab12\n"
    )
    found, commands = _find(monkeypatch, {"squeue": (0, squeue, "")})
    assert found == "43"
    assert [c[0] for c in commands.calls] == ["squeue"]  # found there: accounting not asked
    assert {"--all", "--states=all"} <= set(commands.calls[0])
    assert commands.calls[0][commands.calls[0].index("-u") + 1] == str(os.getuid())


@pytest.fixture
def timezone(monkeypatch):
    """Set the process's local time zone (TZ, POSIX form: no tz database needed); restored after."""

    def set_zone(name: str) -> None:
        monkeypatch.setenv("TZ", name)
        time.tzset()

    yield set_zone
    monkeypatch.undo()
    time.tzset()


# `since` is 2027-01-15T08:00 UTC; sacct -S reads local time (of the host sacct runs on, the worker's),
# so the search starts an hour before it on the local clock, east and west of UTC alike
KEEPS_COMMENTS = (
    0,
    "AccountingStorageType   = accounting_storage/slurmdbd\nAccountingStoreFlags    = job_comment\n",
    "",
)


@pytest.mark.parametrize(
    ("zone", "local_start"),
    [
        ("UTC0", "2027-01-15T07:00:00"),
        ("JST-9", "2027-01-15T16:00:00"),
        ("EST5", "2027-01-15T02:00:00"),
    ],
)
def test_slurm_looks_in_accounting_for_a_job_squeue_forgot(monkeypatch, timezone, zone, local_start):
    timezone(zone)
    sacct = "50|\n51|torchx-airflow-submission:ab12\n"
    found, commands = _find(
        monkeypatch, {"squeue": (0, "", ""), "scontrol": KEEPS_COMMENTS, "sacct": (0, sacct, "")}
    )
    assert found == "51"
    assert [c[0] for c in commands.calls] == ["squeue", "scontrol", "sacct"]
    assert commands.calls[2][commands.calls[2].index("-S") + 1] == local_start
    answers = {"squeue": (0, "", ""), "scontrol": KEEPS_COMMENTS, "sacct": (0, "50|\n", "")}
    assert _find(monkeypatch, answers)[0] is None


@pytest.mark.parametrize(
    "config",
    [
        "AccountingStorageType   = accounting_storage/slurmdbd\nAccountingStoreFlags    = (null)\n",
        "AccountingStorageType = accounting_storage/slurmdbd\nAccountingStoreFlags = job_env,job_script\n",
        "AccountingStorageType   = (null)\n",  # no slurmdbd at all
    ],
    ids=["slurm-default", "other-flags", "no-accounting"],
)
def test_slurm_refuses_to_call_a_job_not_found_when_accounting_keeps_no_comments(monkeypatch, config):
    from torchx_airflow.exceptions import TorchXConfigError

    with pytest.raises(TorchXConfigError, match="AccountingStoreFlags=job_comment") as error:
        _find(monkeypatch, {"squeue": (0, "", ""), "scontrol": (0, config, "")})
    assert "delete the task's state-store key 'torchx_submission'" in str(error.value)


def test_slurm_job_ids_are_ascii_digits_in_slurm_range_before_any_command(monkeypatch):
    from torchx_airflow.schedulers import slurm

    commands = _SlurmCommands({})
    monkeypatch.setattr(slurm, "_run", commands)
    support = slurm.SlurmSupport("slurm", runner=None)
    bad = ["١٢٣", "12a", "", "0", "99999999999999999999", "²"]
    assert support.statuses(bad) == dict.fromkeys(bad)  # unknown, and no command ran
    assert commands.calls == []


@pytest.mark.parametrize(
    "answers",
    [
        {"squeue": (1, "", "slurm_load_jobs error: Unable to contact slurm controller")},
        {
            "squeue": (0, "", ""),
            "scontrol": KEEPS_COMMENTS,
            "sacct": (1, "", "sacct: error: Problem talking to the database"),
        },
    ],
    ids=["squeue", "sacct"],
)
def test_slurm_that_cannot_answer_whether_a_marked_job_exists_raises(monkeypatch, answers):
    with pytest.raises(RuntimeError, match="failed \\(exit code 1\\)"):
        _find(monkeypatch, answers)


NO_ACCOUNTING = (0, "AccountingStorageType   = (null)\n", "")
SQUEUE_101 = (0, "101|RUNNING|/work|trainer-0\n", "")


def _statuses(monkeypatch, answers, ids=("101", "102")):
    from torchx_airflow.schedulers import slurm

    commands = _SlurmCommands(answers)
    monkeypatch.setattr(slurm, "_run", commands)
    answer = slurm.SlurmSupport("slurm", runner=None).statuses(list(ids))
    return {k: (v.state.name if v is not None else None) for k, v in answer.items()}, commands


def test_slurm_without_accounting_asks_squeue_alone_and_an_absent_job_is_unknown(monkeypatch):
    from torchx_airflow.schedulers import slurm

    disabled = (1, "", "sacct: error: Slurm accounting storage is disabled")
    commands = _SlurmCommands({"sacct": disabled, "scontrol": NO_ACCOUNTING, "squeue": SQUEUE_101})
    monkeypatch.setattr(slurm, "_run", commands)
    support = slurm.SlurmSupport("slurm", runner=None)
    for _ in range(2):
        answer = support.statuses(["101", "102"])
        assert {k: v and v.state.name for k, v in answer.items()} == {"101": "RUNNING", "102": None}
    # sacct and scontrol once: the cluster without accounting is remembered
    assert [c[0] for c in commands.calls] == ["sacct", "scontrol", "squeue", "squeue"]


def test_slurm_with_working_accounting_never_asks_scontrol(monkeypatch):
    sacct = (0, "101|RUNNING|0:0|/work|trainer-0\n", "")
    answer, commands = _statuses(monkeypatch, {"sacct": sacct, "squeue": (1, "", "Invalid job id specified")})
    assert answer == {"101": "RUNNING", "102": None}
    assert [c[0] for c in commands.calls] == ["sacct", "squeue"]


class _RenamedJob:
    """sacct and squeue printing job 101, RUNNING, renamed to hold a status line of its own."""

    NAME = "t|COMPLETED|0:0|/w|x\n101|COMPLETED|0:0|/w|trainer-0\n101|NODE_FAIL|1:0|/w|y"

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def __call__(self, cmd):
        self.calls.append(list(cmd))
        delimiter, count = delimiter_and_count(cmd)
        fields = ["101", "RUNNING", "0:0", "/work"][: count - 1] + [self.NAME]
        if cmd[0] == "squeue":
            fields = ["101", "RUNNING", "/work", self.NAME]
        return subprocess.CompletedProcess(cmd, 0, "".join(f + delimiter for f in fields) + "\n", "")


@pytest.mark.parametrize("command", ["sacct", "squeue"])
def test_a_job_that_renames_itself_keeps_its_own_state(monkeypatch, command):
    from torchx_airflow.schedulers import slurm

    renamed = _RenamedJob()
    monkeypatch.setattr(slurm, "_run", renamed)
    query = slurm.sacct_records if command == "sacct" else slurm.squeue_records
    rows = [slurm.job_row(record) for record in query(["101"]) or []]
    assert [(row.app_id, row.state, row.name) for row in rows] == [("101", "RUNNING", _RenamedJob.NAME)]
    assert app_status(rows).state.name == "RUNNING"
    # a fresh delimiter per query: a name set before the query cannot know it
    query(["101"])
    assert delimiter_and_count(renamed.calls[0])[0] != delimiter_and_count(renamed.calls[1])[0]


def test_slurm_with_accounting_down_answers_from_squeue_and_never_calls_a_job_unknown(monkeypatch):
    keeps = (0, "AccountingStorageType = accounting_storage/slurmdbd\n", "")
    down = (1, "", "sacct: error: Problem talking to the database: Connection refused")
    answer, _ = _statuses(monkeypatch, {"scontrol": keeps, "sacct": down, "squeue": SQUEUE_101})
    assert answer == {"101": "RUNNING"}  # 102: unanswered (asked again), not "unknown"


def test_slurm_with_controller_and_accounting_down_raises(monkeypatch):
    ctld_down = (1, "", "slurm_load_jobs error: Unable to contact slurm controller")
    dbd_down = (1, "", "sacct: error: Problem talking to the database: Connection refused")
    with pytest.raises(RuntimeError, match="sacct failed"):
        _statuses(monkeypatch, {"scontrol": ctld_down, "sacct": dbd_down, "squeue": ctld_down})


def test_slurm_leaves_an_infrastructure_end_to_the_task_instead_of_requeueing_the_job():
    """TorchX asks sbatch to --requeue: Slurm would restart the job under the same id, from scratch.
    When the task resubmits (infrastructure_retries > 0) the job gets --no-requeue instead."""
    from torchx_airflow.apps import build_app_from_component

    hook = TorchXHook(scheduler="slurm")
    app = build_app_from_component("dist.ddp", ["-j", "2x1", "--script", "train.py"])
    assert "--requeue" in hook.dryrun(app).info.request.materialize()  # TorchX's own choice
    script = hook.dryrun(app, resubmits=True).info.request.materialize()
    assert "--requeue" not in script
    assert script.count("--no-requeue") == 2  # every heterogeneous component (replica)
    hook.close()
