"""Each app's status parsed from the scheduler's records once, and again only when they change.

A triggerer waiting on 5,000 queued jobs reads the same 5,000 ``sacct`` records every poll. Parsing
them into new ``AppStatus`` objects each time costs CPU, and worse, every poll's new objects pile
up in the heap that CPython's full garbage collection walks while it holds the GIL: a pause of the
triggerer's event loop, whichever thread allocated them. So an app whose records are the same as
at its last query gets the very ``AppStatus`` object of that query (nobody changes a status).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import Generic, TypeVar

Records = TypeVar("Records", bound=Hashable)  # one app's records as printed
Status = TypeVar("Status")

#: Queries after which the entries no query asked for since the previous turn are dropped (an app
#: nobody waits on any more); an entry dropped too early only costs one parse.
GENERATION_QUERIES = 16


class ParsedStatuses(Generic[Records, Status]):
    """App id -> (its records as printed, the status parsed from them), for the apps of recent queries.

    :param parse: the status of one app from its records (called only for new or changed records).
    """

    def __init__(self, parse: Callable[[Records], Status]) -> None:
        self._parse = parse
        # two generations: an entry survives while some query asked for its app during the last
        # GENERATION_QUERIES to 2 * GENERATION_QUERIES queries
        self._current: dict[str, tuple[Records, Status]] = {}
        self._previous: dict[str, tuple[Records, Status]] = {}
        self._queries = 0
        self.parsed = 0  # apps parsed (new or changed records): tests, benchmarks

    def statuses(self, records_by_app: Mapping[str, Records]) -> dict[str, Status]:
        """The status of every app of one query, from its records."""
        self._queries += 1
        if self._queries % GENERATION_QUERIES == 0:
            self._previous, self._current = self._current, {}
        answer = {}
        for app_id, records in records_by_app.items():
            entry = self._current.get(app_id) or self._previous.get(app_id)
            if entry is None or entry[0] != records:
                entry = (records, self._parse(records))
                self.parsed += 1
            self._current[app_id] = entry
            answer[app_id] = entry[1]
        return answer
