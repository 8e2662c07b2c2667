"""Opt-in behaviour of a task's run, each policy joining the run at four points (``base.RunPolicy``)."""
