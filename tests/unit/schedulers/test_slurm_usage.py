"""Slurm usage from sacct (torchx_airflow/schedulers/slurm_usage.py): outputs captured on this project's
Slurm cluster (slurm-wlm 22.05.8, JobAcctGatherFrequency=30) with the command the provider runs."""

from __future__ import annotations

import pytest

from tests.unit.schedulers.slurm_printed import printed
from torchx_airflow.schedulers.slurm_usage import (
    SACCT_FIELDS,
    cpu_seconds,
    memory_mb,
    parse_sacct_usage,
    parse_tres,
    sacct_usage_command,
    summarize_allocations,
)

# `sacct -P -n --units=K -j 814,815,821,822,824 -o JobID,JobName,State,ElapsedRaw,TotalCPU,CPUTimeRAW,
# AllocTRES,MaxRSS,NTasks,ExitCode`, captured 2026-11-24 on the shared test cluster: 814 utils.python
# (1 CPU, 1 GB, 40 s: long enough for a MaxRSS sample), 815 a 3-replica heterogeneous job cancelled
# while pending (a one-node cluster cannot place it), 821 a 2-CPU job burning 3 s of CPU in 8 s (no
# MaxRSS: shorter than the 30 s sampling), 822 a job that exited 3, 824 3 CPUs and 2 GB for 43 s with
# a 120 MB buffer.
SACCT_OUTPUT = """\
814|python-0|COMPLETED|40|00:00.063|40|billing=1,cpu=1,mem=1048576K,node=1|||0:0
814.batch|batch|COMPLETED|40|00:00.016|40|cpu=1,mem=1048576K,node=1|12316K|1|0:0
814.0|python|COMPLETED|40|00:00.047|40|cpu=1,mem=1048576K,node=1|12116K|1|0:0
815+0|trainer-0|CANCELLED by 0|0|00:00:00|0||||0:0
815+1|trainer-1|CANCELLED by 0|0|00:00:00|0||||0:0
815+2|reader-0|CANCELLED by 0|0|00:00:00|0||||0:0
821|trainer-0|COMPLETED|8|00:03.195|16|billing=2,cpu=2,mem=524288K,node=1|||0:0
821.batch|batch|COMPLETED|8|00:00.015|16|cpu=2,mem=524288K,node=1||1|0:0
821.0|python3|COMPLETED|8|00:03.180|16|cpu=2,mem=524288K,node=1||1|0:0
822|trainer-0|FAILED|2|00:00.142|2|billing=1,cpu=1,mem=262144K,node=1|||3:0
822.batch|batch|FAILED|2|00:00.016|2|cpu=1,mem=262144K,node=1||1|3:0
822.0|python3|FAILED|2|00:00.126|2|cpu=1,mem=262144K,node=1||1|3:0
824|trainer-0|COMPLETED|43|00:04.261|129|billing=3,cpu=3,mem=2097152K,node=1|||0:0
824.batch|batch|COMPLETED|43|00:00.017|129|cpu=3,mem=2097152K,node=1|12232K|1|0:0
824.0|python3|COMPLETED|43|00:04.244|129|cpu=3,mem=2097152K,node=1|136432K|1|0:0
"""
# The same jobs' AllocTRES as sacct prints it without --units (`-X -o JobID,AllocTRES`).
DEFAULT_UNITS_TRES = {
    "814": "billing=1,cpu=1,mem=1G,node=1",
    "821": "billing=2,cpu=2,mem=512M,node=1",
    "822": "billing=1,cpu=1,mem=256M,node=1",
    "824": "billing=3,cpu=3,mem=2G,node=1",
}


DELIMITER = "#0123456789abcdef#"


def _parse(captured: str) -> list[dict]:
    """``captured`` (the fields in the capture's order, name second) parsed as the provider's
    command prints it: the name moved last, every field ended by the delimiter."""
    rows = [line.split("|") for line in captured.splitlines()]
    reordered = "\n".join("|".join([row[0], *row[2:], row[1]]) for row in rows)
    return parse_sacct_usage(printed(reordered, DELIMITER, len(SACCT_FIELDS)), DELIMITER)


def _allocations() -> dict[str, dict]:
    return {a["job_id"]: a for a in _parse(SACCT_OUTPUT)}


def test_the_command_asks_for_every_field_in_kib_without_headers_the_name_last():
    cmd = sacct_usage_command(["824"], DELIMITER)
    assert cmd[:6] == ["sacct", "-p", f"--delimiter={DELIMITER}", "-n", "--units=K", "-j"]
    assert cmd[6:] == ["824", "-o", ",".join(SACCT_FIELDS)]
    assert SACCT_FIELDS[-1] == "JobName"


def test_a_job_name_holding_delimiters_and_fake_rows_shifts_nothing():
    """A job renamed to ``x|COMPLETED|...`` with a newline and a whole fake allocation row keeps its
    own state, exit code and figures; the fake row is part of its name."""
    name = "x|FAILED|1|00:00:01|1|cpu=1|||0:0|\n900|COMPLETED|99|00:00:01|99|cpu=64|||0:0|y"
    fields = ["900", "RUNNING", "5", "00:00.010", "5", "cpu=1,mem=1024K,node=1", "", "", "0:0", name]
    text = "".join(field + DELIMITER for field in fields) + "\n"
    (allocation,) = parse_sacct_usage(text, DELIMITER)
    assert (allocation["state"], allocation["elapsed_s"], allocation["name"]) == ("RUNNING", 5, name)


def test_every_allocation_with_its_steps_and_sacct_figures():
    allocations = _allocations()
    assert list(allocations) == ["814", "815+0", "815+1", "815+2", "821", "822", "824"]
    job = allocations["824"]
    assert (job["name"], job["state"], job["elapsed_s"], job["cpu_time_s"], job["cpu_time_alloc_s"]) == (
        "trainer-0",
        "COMPLETED",
        43,
        4.261,
        129,
    )
    assert [s["job_id"] for s in job["steps"]] == ["824.batch", "824.0"]
    step = job["steps"][1]
    assert (step["name"], step["elapsed_s"], step["cpu_time_s"], step["ntasks"]) == ("python3", 43, 4.244, 1)
    assert step["max_rss_mb"] == 136432 / 1024
    assert step["alloc_tres"] == {"cpu": 3, "mem_mb": 2048, "node": 1, "billing": 0, "gpu": {}, "other": {}}
    assert allocations["822"]["exit_code"] == "3:0" and allocations["822"]["state"] == "FAILED"


@pytest.mark.parametrize("job_id", sorted(DEFAULT_UNITS_TRES))
def test_alloc_tres_in_kib_parses_to_what_sacct_shows_by_default(job_id):
    """--units=K loses nothing: the same numbers as sacct's own ``mem=1G``/``512M``."""
    assert _allocations()[job_id]["alloc_tres"] == parse_tres(DEFAULT_UNITS_TRES[job_id])


def test_the_apps_usage_sums_its_allocations_and_prices_what_they_held():
    usage = summarize_allocations([_allocations()["824"]])
    assert usage["source"] == "sacct"
    assert (usage["elapsed_s"], usage["cpu_time_s"], usage["max_rss_mb"]) == (43, 4.261, 136432 / 1024)
    assert usage["allocated"] == {"cpu": 3, "mem_mb": 2048, "gpu": {}, "node": 1}
    assert usage["totals"] == {"cpu_hours": 129 / 3600, "gpu_hours": {}, "mem_gb_hours": 2 * 43 / 3600}
    short = summarize_allocations([_allocations()["821"]])
    assert short["max_rss_mb"] is None  # no sample in 8 s: Slurm has none, and none is made up


def test_a_heterogeneous_job_is_one_app_of_several_allocations():
    allocations = _allocations()
    het = [allocations[f"815+{i}"] for i in range(3)]
    usage = summarize_allocations(het)
    assert [j["name"] for j in usage["jobs"]] == ["trainer-0", "trainer-1", "reader-0"]
    assert usage["elapsed_s"] == 0 and usage["totals"]["cpu_hours"] == 0  # cancelled before it ran
    assert usage["allocated"]["cpu"] == 0  # nothing was allocated (AllocTRES is empty)
    two = summarize_allocations([allocations["814"], allocations["821"]])
    assert two["allocated"] == {"cpu": 3, "mem_mb": 1536, "gpu": {}, "node": 2}
    assert two["elapsed_s"] == 40 and two["cpu_time_s"] == round(0.063 + 3.195, 3)
    assert two["totals"]["cpu_hours"] == (40 + 16) / 3600


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00.063", 0.063),  # what the captured jobs show: MM:SS.mmm
        ("00:00:00", 0.0),
        ("59:59.999", 3599.999),
        ("01:02:03", 3723.0),  # an hour or more: HH:MM:SS
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5),  # days
        ("", None),
    ],
)
def test_total_cpu_in_each_of_sacct_formats(text, seconds):
    assert cpu_seconds(text) == seconds


@pytest.mark.parametrize(
    ("text", "mb"),
    [("12316K", 12316 / 1024), ("524288K", 512), ("0", 0), ("1.5G", 1536), ("2T", 2 * 1024**2), ("", None)],
)
def test_memory_figures_in_mb(text, mb):
    assert memory_mb(text) == mb


def test_a_memory_figure_it_cannot_read_is_an_error():
    with pytest.raises(ValueError, match="'12Q'"):
        memory_mb("12Q")


# The same command on a private cluster whose node has two a100 GPUs (`cluster.sh up --private --gpus
# a100:2`, AccountingStorageTRES=gres/gpu,gres/gpu:a100): a job asking 2 CPUs, 2 GPUs and 1 GB.
SACCT_GPU_OUTPUT = """\
1|trainer-0|COMPLETED|3|00:01.182|6|billing=2,cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=1048576K,node=1|||0:0
1.batch|batch|COMPLETED|3|00:00.016|6|cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=1048576K,node=1||1|0:0
1.0|python3|COMPLETED|3|00:01.165|6|cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=1048576K,node=1||1|0:0
"""


def test_gpus_by_type_as_accounting_records_them():
    (job,) = _parse(SACCT_GPU_OUTPUT)
    assert job["alloc_tres"]["gpu"] == {"a100": 2}  # gres/gpu=2 counts the same two GPUs
    assert [step["alloc_tres"]["gpu"] for step in job["steps"]] == [{"a100": 2}, {"a100": 2}]
    usage = summarize_allocations([job])
    assert usage["allocated"]["gpu"] == {"a100": 2}
    assert usage["totals"]["gpu_hours"] == {"a100": 2 * 3 / 3600}
    assert usage["totals"]["cpu_hours"] == 6 / 3600


def test_gpus_accounting_records_without_a_type_are_untyped():
    """A site whose AccountingStorageTRES lists only gres/gpu: the GRES syntax of AllocTRES
    (slurm.schedmd.com/tres.html), as the line above would read there."""
    assert parse_tres("billing=2,cpu=2,gres/gpu=2,mem=1G,node=1")["gpu"] == {"untyped": 2}
    assert parse_tres("cpu=8,gres/gpu:a100=2,gres/gpu=3,mem=64G,node=1")["gpu"] == {"a100": 2, "untyped": 1}
    assert parse_tres("cpu=1,license/matlab=1")["other"] == {"license/matlab": "1"}
