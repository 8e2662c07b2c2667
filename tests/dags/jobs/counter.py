"""A job that prints numbered lines for a while, then exits with the given code (for Slurm tests)."""

from __future__ import annotations

import argparse
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=3)
parser.add_argument("--exit-code", type=int, default=0)
args = parser.parse_args()
steps = max(1, int(args.seconds))
for i in range(1, steps + 1):
    print(f"line {i}/{steps}", flush=True)
    time.sleep(args.seconds / steps)
print("to stderr", file=sys.stderr, flush=True)
sys.exit(args.exit_code)
