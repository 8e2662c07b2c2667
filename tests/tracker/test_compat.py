"""``compat.cached_property``: cached per instance, and no instance waits for another's computation."""

from __future__ import annotations

import threading

from torchx_airflow_tracker.compat import cached_property


class Slow:
    def __init__(self, gate: threading.Event | None) -> None:
        self.gate = gate
        self.calls = 0

    @cached_property
    def value(self) -> int:
        self.calls += 1
        if self.gate is not None:
            assert self.gate.wait(30)
        return self.calls


def test_one_instance_computing_holds_no_other_instance_back():
    gate = threading.Event()
    blocked = Slow(gate)
    threading.Thread(target=lambda: blocked.value, daemon=True).start()
    free: list[int] = []
    worker = threading.Thread(target=lambda: free.append(Slow(None).value), daemon=True)
    worker.start()
    worker.join(10)
    gate.set()
    assert free == [1], "an instance waited for another instance's computation"


def test_the_value_is_computed_once_per_instance():
    slow = Slow(None)
    assert (slow.value, slow.value, slow.calls) == (1, 1, 1)
    assert "value" in vars(slow) and isinstance(Slow.value, cached_property)
