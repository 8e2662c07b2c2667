"""Usage and cost of a run: price tables, estimates, ``max_cost``, and the accounting of what a run used."""
