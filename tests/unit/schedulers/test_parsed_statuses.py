"""An app whose records did not change since its last query is not parsed again
(torchx_airflow/schedulers/parsed_statuses.py); the same on the real Slurm cluster:
tests/slurm/test_slurm_scheduler.py."""

from __future__ import annotations

from torchx_airflow.schedulers import parsed_statuses
from torchx_airflow.schedulers.parsed_statuses import ParsedStatuses


def _parser() -> tuple[ParsedStatuses[tuple, dict], list[tuple]]:
    parsed: list[tuple] = []

    def parse(records: tuple) -> dict:
        parsed.append(records)
        return {"records": records}

    return ParsedStatuses(parse), parsed


def test_unchanged_records_give_the_same_status_object_and_changed_ones_a_new_one():
    cache, parsed = _parser()
    first = cache.statuses({"1": (("1", "PENDING"),), "2": (("2", "PENDING"),)})
    # new strings with the same text: what a new query prints
    again = cache.statuses({"1": (("1", "PEND" + "ING"),), "2": (("2", "RUNNING"),)})
    assert again["1"] is first["1"]
    assert again["2"] is not first["2"] and again["2"]["records"] == (("2", "RUNNING"),)
    assert len(parsed) == 3 and cache.parsed == 3


def test_apps_no_query_asks_for_are_dropped_after_two_generations():
    cache, parsed = _parser()
    cache.statuses({"gone": (("gone", "PENDING"),)})
    for _ in range(2 * parsed_statuses.GENERATION_QUERIES):
        cache.statuses({"kept": (("kept", "PENDING"),)})
    cache.statuses({"gone": (("gone", "PENDING"),)})
    assert [records[0][0] for records in parsed] == ["gone", "kept", "gone"]
