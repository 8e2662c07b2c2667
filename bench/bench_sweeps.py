"""Sweeps: the choice of a rung over 10,000 trials (``sweeps.halving.choose``: one sort of the values
each segment's worker recorded, the best third kept, ties to the earliest) against a bounded heap
(``heapq.nsmallest``), the other way to take it; target under 0.1 s."""

from __future__ import annotations

import heapq
import random

from bench.common import figure, interleaved, median

TRIALS = 10_000
TARGET_SECONDS = 0.1


def run() -> list[dict]:
    from torchx_airflow.sweeps.halving import choose, survivors

    rng = random.Random(11)
    values = [(i, rng.random() if i % 97 else None) for i in range(TRIALS)]  # a few failed segments
    keep = survivors(TRIALS, 3)

    def bounded_heap() -> list[int]:
        return [i for _, i in heapq.nsmallest(keep, ((v, i) for i, v in values if isinstance(v, float)))]

    assert choose(values, keep, "min") == bounded_heap()
    times = interleaved({"choose": lambda: choose(values, keep, "min"), "heap": bounded_heap}, repeat=21)
    value, base = median(times["choose"]), median(times["heap"])
    return [
        figure(
            f"choice of a rung over {TRIALS:,} trials (keep {keep:,})",
            "a bounded heap (heapq.nsmallest), same values, same run",
            f"under {TARGET_SECONDS:g} s",
            value,
            base,
            "s",
            lambda _ratio: value < TARGET_SECONDS,
            note=f"median of 21 interleaved runs; {TRIALS // 97 + 1} trials without a value are dropped",
        )
    ]
