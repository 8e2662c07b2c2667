"""Usage and cost of a run: its estimate and ``max_cost`` before submitting, its accounting after."""
