"""Reading ``sacct`` and ``squeue`` output that no job can shift.

A job can rename itself (``scontrol update JobId=$SLURM_JOB_ID JobName=...``) and set its own comment,
and Slurm prints both raw: a ``|``, a newline, any control character. Split at ``|`` and line ends,
a name such as ``x|COMPLETED|0:0`` or ``x\\n<id>|COMPLETED|...`` would move a running job's state
column or add a row of its own. So every query here:

- separates fields with a delimiter drawn afresh for each query (``#`` + 16 random hex digits + ``#``,
  ``sacct -p --delimiter=...``, or the same text between ``squeue -o`` fields), which no name set
  before the query can hold;
- ends every field, the last one too, with that delimiter: a record is exactly ``count`` fields, and
  newlines inside a name are part of the name;
- puts the fields a job can write (name, comment) last, so that even a delimiter in them could only
  lengthen the last field, never move a state or an exit code.
"""

from __future__ import annotations

import re
import secrets

# a job id as sacct and squeue print it: 123, 123+1 (a heterogeneous component), 123_4 (an array
# task), 123.batch (a step)
_JOB_ID = re.compile(r"^\d+(?:[+_]\d+)?(?:\.[A-Za-z0-9_-]+)?$")


def new_delimiter() -> str:
    """A field delimiter for one query: nothing printed before the query can hold it."""
    return f"#{secrets.token_hex(8)}#"


def squeue_format(codes: list[str], delimiter: str) -> str:
    """``squeue -o`` text printing ``codes`` (``%i``...), each followed by ``delimiter``."""
    return "".join(code + delimiter for code in codes)


def split_records(text: str, delimiter: str, count: int) -> list[list[str]]:
    """The records of ``count`` fields in ``text``, where every field ends with ``delimiter``.

    A record whose first field is not a job id is dropped (Slurm prints none; it would mean the
    output is not what was asked for). Fields are returned as printed, minus the line end that
    separates records.
    """
    tokens = text.split(delimiter)
    records = []
    # k records are k * count tokens and the newline after the last delimiter
    for start in range(0, len(tokens) - count + 1, count):
        fields = tokens[start : start + count]
        fields[0] = fields[0].strip()
        if _JOB_ID.match(fields[0]):
            records.append(fields)
    return records
