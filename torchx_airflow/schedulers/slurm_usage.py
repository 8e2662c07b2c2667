"""What a Slurm job used, from Slurm's own accounting: one ``sacct`` query per finished app.

``sacct -p --delimiter=<fresh> -n --units=K -j <id> -o JobID,State,ElapsedRaw,TotalCPU,CPUTimeRAW,
AllocTRES,MaxRSS,NTasks,ExitCode,JobName`` (the name last, fields split as
``schedulers.slurm_fields`` says) lists each allocation of the app (one per replica: a heterogeneous job's
components are ``123+0``, ``123+1``...) and each of its steps (``123.batch``, ``123.extern``,
``123.0``). ``--units=K`` puts every memory figure in KiB with its unit written out (``mem=524288K``,
``MaxRSS=12316K``), so nothing is rounded; without it sacct prints ``mem=1G`` and ``12.03M``.

Per allocation and per step: ``ElapsedRaw`` (seconds), ``TotalCPU`` (CPU time used, user + system,
of the steps' processes), ``CPUTimeRAW`` (allocated CPUs x elapsed: what the allocation held),
``AllocTRES`` parsed (``cpu``, ``mem`` in MB, ``gres/gpu`` and ``gres/gpu:<type>`` by type, the rest
as given) and ``MaxRSS`` (the peak resident memory of the step's largest task, sampled every
``JobAcctGatherFrequency`` seconds: a step shorter than that may have none). The totals price what
the allocations held: CPU-hours are ``CPUTimeRAW / 3600``, GPU-hours and memory GB-hours the
allocated count times elapsed.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from torchx_airflow.schedulers.slurm_fields import new_delimiter, split_records

SACCT_FIELDS = (
    "JobID",
    "State",
    "ElapsedRaw",
    "TotalCPU",
    "CPUTimeRAW",
    "AllocTRES",
    "MaxRSS",
    "NTasks",
    "ExitCode",
    # last: a job can rename itself, and its name must not move the fields before it
    "JobName",
)
MEMORY_UNITS = "K"
_UNIT_FACTOR = {"": 1.0, "K": 1.0, "M": 1024.0, "G": 1024.0**2, "T": 1024.0**3, "P": 1024.0**4}
_MEMORY = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<unit>[KMGTP]?)$")
#: The GPU type of a ``gres/gpu=N`` that accounting records without a type (priced at ``default``).
UNTYPED_GPU = "untyped"
BASIS = {
    "cpu": "allocated CPUs x elapsed (sacct CPUTimeRAW)",
    "gpu": "allocated GPUs x elapsed (sacct AllocTRES gres/gpu)",
    "mem": "allocated memory x elapsed (sacct AllocTRES mem)",
}


def sacct_usage_command(job_ids: Sequence[str], delimiter: str) -> list[str]:
    """The ``sacct`` command that lists the allocations and steps of ``job_ids``, every field ended
    by ``delimiter`` (``schedulers.slurm_fields.new_delimiter``)."""
    return [
        "sacct",
        "-p",
        f"--delimiter={delimiter}",
        "-n",
        f"--units={MEMORY_UNITS}",
        "-j",
        ",".join(job_ids),
        "-o",
        ",".join(SACCT_FIELDS),
    ]


def memory_mb(value: str) -> float | None:
    """A sacct memory figure in MB (MiB): ``524288K`` -> 512.0, ``2G`` -> 2048.0; None when empty.

    A figure without a unit is in the unit asked for (``--units=K``): ``0`` is 0.
    """
    value = value.strip()
    if not value:
        return None
    match = _MEMORY.match(value)
    if match is None:
        raise ValueError(f"not a sacct memory figure: {value!r}")
    kib = float(match["number"]) * _UNIT_FACTOR[match["unit"]]
    return kib / 1024.0


def cpu_seconds(value: str) -> float | None:
    """sacct's ``TotalCPU`` in seconds: ``[D-]HH:MM:SS``, ``MM:SS.mmm``; None when empty.

    >>> cpu_seconds("00:03.195"), cpu_seconds("01:02:03"), cpu_seconds("1-00:00:01")
    (3.195, 3723.0, 86401.0)
    """
    value = value.strip()
    if not value:
        return None
    days, _, clock = value.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    if not 1 <= len(parts) <= 3:
        raise ValueError(f"not a sacct time: {value!r}")
    seconds = 0.0
    for part in parts:
        seconds = seconds * 60 + part
    return round(seconds + (int(days) * 86400 if days else 0), 3)


def parse_tres(value: str) -> dict[str, Any]:
    """``AllocTRES`` as numbers: ``cpu``, ``mem_mb``, ``node``, ``billing``, ``gpu`` by type, the
    others (``gres/<name>``, ``license/<name>``...) under ``other`` as sacct wrote them.

    ``gres/gpu=4,gres/gpu:a100=3`` is ``{"a100": 3, "untyped": 1}``: the typed counts, and what the
    untyped total has beyond them (a site whose ``AccountingStorageTRES`` lists only ``gres/gpu``
    records no types at all).
    """
    tres: dict[str, Any] = {"cpu": 0, "mem_mb": 0.0, "node": 0, "billing": 0, "gpu": {}, "other": {}}
    gpu_total = 0
    for item in (i for i in value.split(",") if i.strip()):
        name, _, amount = item.strip().partition("=")
        if name == "mem":
            tres["mem_mb"] = memory_mb(amount) or 0.0
        elif name in ("cpu", "node", "billing"):
            tres[name] = int(amount)
        elif name == "gres/gpu":
            gpu_total = int(amount)
        elif name.startswith("gres/gpu:"):
            tres["gpu"][name.removeprefix("gres/gpu:")] = int(amount)
        else:
            tres["other"][name] = amount
    untyped = gpu_total - sum(tres["gpu"].values())
    if untyped > 0:
        tres["gpu"][UNTYPED_GPU] = untyped
    return tres


def _row(fields: Sequence[str]) -> dict[str, Any]:
    job_id, state, elapsed, total_cpu, cpu_time_raw, tres, max_rss, ntasks, exit_code, name = fields
    return {
        "job_id": job_id,
        "name": name,
        "state": state,
        "elapsed_s": int(elapsed) if elapsed.strip() else 0,
        "cpu_time_s": cpu_seconds(total_cpu) or 0.0,
        "cpu_time_alloc_s": int(cpu_time_raw) if cpu_time_raw.strip() else 0,
        "alloc_tres": parse_tres(tres),
        "max_rss_mb": memory_mb(max_rss),
        "ntasks": int(ntasks) if ntasks.strip() else None,
        "exit_code": exit_code,
    }


def parse_sacct_usage(text: str, delimiter: str) -> list[dict[str, Any]]:
    """The allocations in ``sacct_usage_command``'s output, each with its ``steps``, in sacct's order."""
    allocations: dict[str, dict[str, Any]] = {}
    for fields in split_records(text, delimiter, len(SACCT_FIELDS)):
        row = _row(fields)
        allocation_id, dot, _ = row["job_id"].partition(".")
        if not dot:
            allocations[allocation_id] = {**row, "steps": []}
        elif allocation_id in allocations:
            allocations[allocation_id]["steps"].append(row)
    return list(allocations.values())


def _peak(values: Iterable[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return max(known) if known else None


def summarize_allocations(allocations: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The app's usage from its allocations: figures summed over them, totals to price, the jobs."""
    gpu: dict[str, int] = {}
    gpu_hours: dict[str, float] = {}
    mem_gb_hours = 0.0
    for allocation in allocations:
        tres, hours = allocation["alloc_tres"], allocation["elapsed_s"] / 3600.0
        for gpu_type, count in tres["gpu"].items():
            gpu[gpu_type] = gpu.get(gpu_type, 0) + count
            gpu_hours[gpu_type] = gpu_hours.get(gpu_type, 0.0) + count * hours
        mem_gb_hours += tres["mem_mb"] / 1024.0 * hours
    steps = [step for allocation in allocations for step in allocation["steps"]]
    return {
        "source": "sacct",
        "elapsed_s": max((a["elapsed_s"] for a in allocations), default=0),
        "cpu_time_s": round(sum(a["cpu_time_s"] for a in allocations), 3),
        "max_rss_mb": _peak(s["max_rss_mb"] for s in steps),
        "allocated": {
            "cpu": sum(a["alloc_tres"]["cpu"] for a in allocations),
            "mem_mb": sum(a["alloc_tres"]["mem_mb"] for a in allocations),
            "gpu": gpu,
            "node": sum(a["alloc_tres"]["node"] for a in allocations),
        },
        "totals": {
            "cpu_hours": sum(a["cpu_time_alloc_s"] for a in allocations) / 3600.0,
            "gpu_hours": gpu_hours,
            "mem_gb_hours": mem_gb_hours,
        },
        "basis": dict(BASIS),
        "jobs": [dict(a) for a in allocations],
    }


def sacct_usage(job_id: str, timeout: float = 60) -> dict[str, Any] | None:
    """The usage of Slurm job ``job_id`` from ``sacct``; None when accounting has no such job.

    Raises when sacct fails.
    """
    delimiter = new_delimiter()
    command = sacct_usage_command([job_id], delimiter)
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"sacct failed (exit code {proc.returncode}): {proc.stderr.strip()}")
    allocations = [
        a for a in parse_sacct_usage(proc.stdout, delimiter) if a["job_id"].split("+", 1)[0] == job_id
    ]
    return summarize_allocations(allocations) if allocations else None
