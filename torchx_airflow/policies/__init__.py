"""Opt-in behaviour of a task's run, each policy joining it at the points of ``run.points.RunPolicy``."""
