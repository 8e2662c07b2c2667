"""Faults injected for real, at the command level: shims for Slurm's commands put first on the PATH
of Airflow's services (worker, triggerer), which run the real command unless a fault is armed.

A fault is a file in the fault directory, read and updated by the shims themselves:

``fail``        a number N: the next N status commands (``sacct``, ``squeue``, ``scontrol``) exit 1.
``after_sbatch`` a shell snippet run right after a successful ``sbatch`` (e.g. stop a tracker server).
``kill_poller`` present: the first status command after it was armed SIGKILLs the process that ran
                it (the task process polling its app), then the file is removed.
``hold_tasks``  a number N: status commands run by a task process (not the triggerer) sleep N
                seconds first, so a test can catch a task mid-wait (e.g. a deferred task resuming).
``kill_submitter`` present: the next ``sbatch`` submits the job, then SIGKILLs the process that ran
                it before it can read the job id (the task process submitting), then the file is
                removed.

Every shim call is appended to ``calls.log`` (command name and its parent pid), so a test can count
the scheduler queries a wait made.
"""

from __future__ import annotations

import shutil
from pathlib import Path

STATUS_COMMANDS = ("sacct", "squeue", "scontrol")

_SHIM = r"""#!/usr/bin/env bash
# test shim for {name}: see tests/faults.py
faults={faults}
real={real}
echo "{name} $PPID" >> "$faults/calls.log"
if [ "{name}" != sbatch ]; then
  exec 9>"$faults/.lock"; flock 9
  if [ -e "$faults/kill_poller" ]; then
    rm -f "$faults/kill_poller"; flock -u 9
    echo "killed $PPID" >> "$faults/calls.log"
    kill -9 "$PPID"; exit 1
  fi
  hold=$(cat "$faults/hold_tasks" 2>/dev/null || true)
  if [ -n "$hold" ] && tr '\0' ' ' < "/proc/$PPID/cmdline" 2>/dev/null | grep -q '^airflow worker -- '; then
    flock -u 9
    echo "held $PPID" >> "$faults/calls.log"
    sleep "$hold"
    flock 9
  fi
  n=$(cat "$faults/fail" 2>/dev/null || echo 0)
  if [ "${{n:-0}}" -gt 0 ]; then
    echo $((n - 1)) > "$faults/fail"; flock -u 9
    echo "{name}: injected failure" >&2; exit 1
  fi
  flock -u 9
  exec "$real" "$@"
fi
out=$("$real" "$@") || exit $?
if [ -e "$faults/kill_submitter" ]; then
  rm -f "$faults/kill_submitter"
  echo "submitter-killed $PPID $out" >> "$faults/calls.log"
  kill -9 "$PPID"; exit 1
fi
if [ -s "$faults/after_sbatch" ]; then bash "$faults/after_sbatch" >> "$faults/after_sbatch.log" 2>&1; fi
echo "$out"
"""


class CommandFaults:
    """Shims for sbatch and the status commands in ``root/bin``; faults armed by writing files."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.bin = root / "bin"
        self.bin.mkdir(parents=True, exist_ok=True)
        for name in (*STATUS_COMMANDS, "sbatch"):
            real = shutil.which(name)
            assert real, f"{name} is not installed"
            shim = self.bin / name
            shim.write_text(_SHIM.format(name=name, faults=root, real=real))
            shim.chmod(0o755)

    def path(self, current: str) -> str:
        """``PATH`` with the shims first."""
        return f"{self.bin}:{current}"

    def fail_status(self, times: int) -> None:
        (self.root / "fail").write_text(str(times))

    def after_sbatch(self, snippet: str) -> None:
        (self.root / "after_sbatch").write_text(snippet)

    def hold_tasks(self, seconds: float) -> None:
        (self.root / "hold_tasks").write_text(str(seconds))

    def kill_next_poller(self) -> None:
        (self.root / "kill_poller").touch()

    def kill_next_submitter(self) -> None:
        (self.root / "kill_submitter").touch()

    def clear(self) -> None:
        for name in ("fail", "hold_tasks", "after_sbatch", "kill_poller", "kill_submitter", "calls.log"):
            (self.root / name).unlink(missing_ok=True)

    def calls(self) -> list[str]:
        log = self.root / "calls.log"
        return log.read_text().splitlines() if log.exists() else []
