"""Slurm output as ``sacct -p --delimiter=D`` and ``squeue -o '%i D%T D...'`` print it, from rows
written with ``|`` (the last field keeps any ``|`` of its own, as a job name or comment may)."""

from __future__ import annotations


def printed(rows: str, delimiter: str, count: int) -> str:
    """``rows`` (one per line, ``|`` between fields) with every field ended by ``delimiter``."""
    lines = [line.split("|", count - 1) for line in rows.splitlines() if line]
    return "".join("".join(field + delimiter for field in fields) + "\n" for fields in lines)


def delimiter_and_count(cmd: list[str]) -> tuple[str, int]:
    """The delimiter and the field count a sacct or squeue command asked for."""
    fields = cmd[cmd.index("-o") + 1]
    if cmd[0] == "sacct":
        delimiter = next(arg for arg in cmd if arg.startswith("--delimiter=")).split("=", 1)[1]
        return delimiter, len(fields.split(","))
    delimiter = fields[2 : fields.index("%", 2)]  # what follows the first %x code
    return delimiter, fields.count("%")
