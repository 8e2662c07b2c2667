"""Short full garbage collections in a triggerer that holds thousands of waits.

CPython's full (generation 2) collection walks every tracked object of the process while it holds
the GIL, so it stops the triggerer's event loop whichever thread it runs in. With 5,000 waits the
heap holds about 300,000 objects (Airflow's and the waits'), a full collection costs 160-180 ms of
CPU (far more wall time on a busy machine: Airflow warns at 0.1 s of lateness), and the waits'
short-lived futures bring one about every 30 s. Nearly all of those objects live as long as the
process or their wait, so once the wait set is built they are moved out of the collector's sight
(``gc.freeze()``): a full collection then walks what came after (about 16 ms).

What is frozen is never collected, so a cycle among frozen objects that becomes garbage (a wait
that ended) stays until it is unfrozen. ``HeapFreezer`` bounds that: once waits counting half of
the frozen ones have ended since, the heap is unfrozen, collected once, and frozen again (one full
collection per half turnover of the wait set instead of one every 30 s); when the process waits on
nothing any more it is unfrozen.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger(__name__)

#: Waits from which the heap is frozen: below that a full collection is short anyway.
FREEZE_FROM = 1000
#: The wait set is frozen again once it grew by this factor since the last freeze.
GROWTH = 1.25


class HeapFreezer:
    """When to freeze and unfreeze the heap, from the number of waits after each poll.

    One per process (``FREEZER``): the heap is the process's, whichever poller waits.
    """

    def __init__(self) -> None:
        self.frozen_waits = 0  # waits at the last freeze; 0: not frozen
        self.ended = 0  # waits ended since the last freeze or collection

    def wait_ended(self) -> None:
        self.ended += 1

    def after_poll(self, waits: int) -> None:
        """Freeze, refreeze after a collection, or unfreeze, for ``waits`` waits now."""
        if self.frozen_waits and waits < FREEZE_FROM:
            gc.unfreeze()  # the next full collection reclaims what ended meanwhile
            self.frozen_waits = self.ended = 0
        elif self.frozen_waits and self.ended * 2 >= self.frozen_waits:
            gc.unfreeze()
            gc.collect()  # what ended while frozen, once, before freezing the rest again
            self._freeze(waits)
        elif waits >= FREEZE_FROM and waits >= GROWTH * self.frozen_waits:
            self._freeze(waits)

    def _freeze(self, waits: int) -> None:
        gc.freeze()
        log.debug("Heap frozen at %d waits (%d objects)", waits, gc.get_freeze_count())
        self.frozen_waits, self.ended = waits, 0


FREEZER = HeapFreezer()
