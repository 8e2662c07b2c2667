"""How much a reader of what any job wrote reads from a store: per entry, per run and in all.

A store is written by every job that tracks to it, so what a reader reads back is a stranger's
input: a run can hold one huge entry, many entries of just under any per-entry bound, or tens of
thousands of small files. A reader that decides or draws something (the views in the API server, the
worker reading a run's results when it ends) gives its store ``ReadLimits.for_readers()``; the job
itself, reading its own run, keeps the default (no bound).

The run bound counts one query of a run (its metadata, its artifacts, its sources); the total counts
the entries a store object reads: a view opens its stores for one request, a task for one run (its
own results at the end count afresh: ``renewed``). Bounds count bytes.
What a limit leaves unread is named in ``store.oversized`` (run id -> what was skipped), so the views
can say a run was not read in full; a reader never fails for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: one entry (an fsspec file, an MLflow run's tags): a job's own stay far below it (a metrics entry
#: of 100 curves of 1,000 points is under 3 MiB)
ENTRY_BYTES = 8 << 20
#: all the entries of one run read by one query (its metadata, its artifacts, its sources)
RUN_BYTES = 16 << 20
#: all the entries read through one store object (one request of a view, one task's reads)
TOTAL_BYTES = 32 << 20
#: the entries of one run's category (metadata, artifacts, sources) read: the oldest first, since
#: the run's own job writes before anyone else can know its id
RUN_ENTRIES = 1000


@dataclass
class ReadLimits:
    """Bounds of what a store object reads (None: no bound) and what it has read so far."""

    entry_bytes: int | None = None
    #: per query of a run (``start``)
    run_bytes: int | None = None
    total_bytes: int | None = None
    run_entries: int | None = None
    read: dict[str, int] = field(default_factory=dict)
    total: int = 0

    @classmethod
    def for_readers(cls) -> ReadLimits:
        """The bounds of a reader of what any job wrote (fresh counts)."""
        return cls(ENTRY_BYTES, RUN_BYTES, TOTAL_BYTES, RUN_ENTRIES)

    @property
    def bounded(self) -> bool:
        return any(v is not None for v in (self.entry_bytes, self.run_bytes, self.total_bytes))

    def room(self, run_id: str) -> int | None:
        """How many bytes the next entry of ``run_id`` may hold (0: none is read; None: no bound)."""
        bounds = [self.entry_bytes]
        if self.run_bytes is not None:
            bounds.append(max(0, self.run_bytes - self.read.get(run_id, 0)))
        if self.total_bytes is not None:
            bounds.append(max(0, self.total_bytes - self.total))
        known = [b for b in bounds if b is not None]
        return min(known) if known else None

    def why(self, run_id: str, room: int) -> str:
        """Which bound left ``room`` bytes for the next entry of ``run_id``."""
        if self.entry_bytes is not None and room >= self.entry_bytes:
            return f"over {self.entry_bytes} bytes (one entry's bound)"
        if self.total_bytes is not None and self.total_bytes - self.total <= room:
            return f"past {self.total_bytes} bytes read in all (one request's bound)"
        return f"past {self.run_bytes} bytes read of this run (one run's bound)"

    def renewed(self) -> ReadLimits:
        """The same bounds with nothing read yet (the task's reads of its own run, after its
        reads of others)."""
        return ReadLimits(self.entry_bytes, self.run_bytes, self.total_bytes, self.run_entries)

    def start(self, run_id: str) -> None:
        """A new query of ``run_id`` (its metadata, artifacts or sources): its run bound starts over."""
        self.read.pop(run_id, None)

    def charge(self, run_id: str, count: int) -> None:
        self.read[run_id] = self.read.get(run_id, 0) + count
        self.total += count

    def entries(self, names: list, what: str, run_id: str, oversized: dict[str, set[str]]) -> list:
        """The first ``run_entries`` of ``names`` (a run's category listing); the rest named in
        ``oversized``."""
        if self.run_entries is None or len(names) <= self.run_entries:
            return names
        oversized.setdefault(run_id, set()).add(
            f"{what}: {len(names) - self.run_entries} entries past the first {self.run_entries}"
        )
        return names[: self.run_entries]
