"""Run a command on a machine kept busy by another load: ``--cores`` processes spinning on the CPU
and ``--gib`` of memory held resident (touched page by page), stopped when the command ends.

    python tests/busy.py --cores 2 --gib 4 -- make test      # what `make test-busy` runs

The suite must pass so (a CI machine is rarely idle); the load's processes die with this one.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script: tests.services
from tests.services import die_with_parent

PAGE = 4096


def _spin() -> None:
    die_with_parent()
    while True:
        pass


def _hold(gib: float) -> None:
    die_with_parent()
    block = bytearray(int(gib * (1 << 30)))
    for offset in range(0, len(block), PAGE):  # resident, not only reserved
        block[offset] = 1
    while True:
        time.sleep(60)
        block[0] ^= 1


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cores", type=int, default=2, help="processes spinning on the CPU")
    parser.add_argument("--gib", type=float, default=4.0, help="memory held resident, in GiB")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the command to run")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("give the command to run after --")
    load = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.cores)]
    if args.gib > 0:
        load.append(multiprocessing.Process(target=_hold, args=(args.gib,), daemon=True))
    for proc in load:
        proc.start()
    print(
        f"busy.py: {args.cores} spinning processes and {args.gib:g} GiB held, running {command}", flush=True
    )
    try:
        return subprocess.run(command).returncode
    except KeyboardInterrupt:
        return 130
    finally:
        for proc in load:
            if proc.pid is not None:
                os.kill(proc.pid, signal.SIGKILL)
            proc.join()


if __name__ == "__main__":
    sys.exit(main())
