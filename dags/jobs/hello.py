"""A small TorchX job script: greets, counts down, and fails on request.

Run by the example DAG ``torchx_hello`` through the ``utils.python`` component::

    torchx run --scheduler local_cwd utils.python --script dags/jobs/hello.py -- --name Ada --steps 3
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--name", default="world")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--sleep", type=float, default=0.0, help="seconds to sleep at each step")
    parser.add_argument("--fail", action="store_true", help="exit with an error after the steps")
    args = parser.parse_args(argv)

    print(f"hello, {args.name}! (job {os.environ.get('TORCHX_JOB_ID', '<not launched by torchx>')})")
    if os.environ.get("TEAM"):  # set by the policy of dags/torchx_team_policy.py
        print(f"running for team {os.environ['TEAM']}")
    for step in range(args.steps):
        print(f"step {step + 1}/{args.steps}", flush=True)
        time.sleep(args.sleep)
    if args.fail:
        print(f"failing on request after {args.steps} steps", file=sys.stderr)
        return 3
    print("done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
