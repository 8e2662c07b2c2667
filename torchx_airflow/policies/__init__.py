"""Opt-in behaviour of a task's run, each policy joining it at four points (``run.points.RunPolicy``)."""
